"""The emulator's seeded market: per zone, windows out of stock and interruptions at a rate."""

from __future__ import annotations

import time

import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.emulator.client import EmulatorClient
from tpujob.emulator.market import Market, ZoneMarket
from tpujob.errors import StockoutError

PROJECT = "tpujob-test"
CALM, OUT = "us-east5-a", "us-east5-b"


def test_stockout_windows_are_the_seed_s():
    zones = {CALM: ZoneMarket(3600, 0.0), OUT: ZoneMarket(3600, 0.5)}
    a, b = Market(7, zones, drift=0), Market(7, zones, drift=0)
    windows = [t * 1800.0 for t in range(400)]
    outs = [a.stocked_out(OUT, t) for t in windows]
    assert outs == [b.stocked_out(OUT, t) for t in windows]  # the same seed, the same market
    assert 0.4 < sum(outs) / len(outs) < 0.6
    assert not any(a.stocked_out(CALM, t) for t in windows)
    assert outs != [Market(8, zones, drift=0).stocked_out(OUT, t) for t in windows]
    assert not a.stocked_out("europe-west4-a", 0)  # a zone outside the market: never


def test_interruptions_come_at_the_zone_s_rate():
    market = Market(1, {CALM: ZoneMarket(100.0, 0.0)}, drift=0)
    hits = sum(market.interrupts(CALM, 0.0, 1.0) for _ in range(20000))
    assert hits / 20000 == pytest.approx(1 - 2.718281828 ** -0.01, rel=0.15)


def test_the_rates_drift_with_the_time_of_day():
    market = Market(1, {CALM: ZoneMarket(3600.0, 0.2)}, drift=0.4)
    seen = [market.mtbi_at(CALM, h * 3600.0) for h in range(24)]
    assert max(seen) / min(seen) == pytest.approx(2.718281828 ** 0.8, rel=0.05)


@pytest.mark.parametrize("body", [{"zones": {}}, {"zones": {CALM: {"mtbiSeconds": 0}}},
                                  {"zones": {CALM: {"mtbiSeconds": 5, "stockout": 2}}}])
def test_a_bad_market_is_refused(server, body):
    with pytest.raises(Exception, match="zones|mtbiSeconds"):
        EmulatorClient(server.url).market(body["zones"] or {})


def _request(name: str, zone: str) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=zone, name=name, accelerator_type="v5litepod-8",
                        runtime_version="tpu-ubuntu2204-base", provisioning="spot")


def test_the_market_stocks_out_and_preempts_through_the_emulator_s_own_faults(server):
    from tpujob.cloud.tpu_api import GcpCloud

    cloud = GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
    client = EmulatorClient(server.url)
    said = client.market({OUT: {"mtbiSeconds": 10**9, "stockout": 1.0},
                          CALM: {"mtbiSeconds": 2.0, "stockout": 0.0}}, seed=3, drift=0, tick=0.05)
    assert said["market"]["zones"][OUT]["stockedOut"] is True
    with pytest.raises(StockoutError):
        cloud.create_node(_request("full", OUT))
    cloud.create_node(_request("calm", CALM))
    deadline = time.monotonic() + 60  # a mean of 2 s between interruptions: preempted soon
    while cloud.get_slice(PROJECT, CALM, "calm").phase is not SlicePhase.PREEMPTED:
        assert time.monotonic() < deadline, "the market never preempted the node"
        time.sleep(0.05)
    assert client.market(None)["market"] is None
    cloud.create_node(_request("full", OUT))  # the market stopped: capacity again


@pytest.mark.parametrize("args", [["us-east5-a"], ["us-east5-a=fast:0.1"], []])
def test_the_market_command_refuses_a_zone_it_cannot_read(cli, args):
    result = cli("emulator", "market", *args)
    assert result.code == 2 and ("ZONE=MTBI_SECONDS:STOCKOUT" in result.err)
