"""GcpCloud (the real google-cloud-tpu client, REST) against the emulator: the API contract."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from cloud_helpers import PROJECT, ZONE, wait_for_slice

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import CloudError, ConflictError, NotFoundError, StockoutError, UsageError


def request(name: str = "s1", accelerator: str = "v4-16", **kw) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator,
                        runtime_version="tpu-ubuntu2204-base", **kw)


def test_direct_node_is_ready_with_one_endpoint_per_host(cloud, server):
    s = cloud.create_node(request(labels={"tpujob-job": "j1"},
                                  ssh_keys=("tpujob:ssh-ed25519 AAAAC3Nza tpujob",)))
    assert s.phase is SlicePhase.READY and s.node_state == "READY"
    assert s.queued_resource_state is None
    assert len(s.hosts) == 2  # v4-16: 8 chips, 4 per host
    assert len({h.ip for h in s.hosts}) == 2 and all(h.ip.startswith("127.") for h in s.hosts)
    assert s.labels == {"tpujob-job": "j1"} and s.accelerator_type == "v4-16"
    body = server.emulator.tpu.get_node(f"projects/{PROJECT}/locations/{ZONE}/nodes/s1")
    assert body["schedulingConfig"] == {"spot": True}
    assert body["metadata"]["ssh-keys"] == "tpujob:ssh-ed25519 AAAAC3Nza tpujob"
    assert body["networkEndpoints"][0]["port"] == 8470


def test_provisioning_kinds_reach_the_api(cloud, server):
    cloud.create_node(request("od", "v4-8", provisioning="on-demand"))
    cloud.create_node(request("pre", "v4-8", provisioning="preemptible"))
    loc = f"projects/{PROJECT}/locations/{ZONE}"
    assert "schedulingConfig" not in server.emulator.tpu.get_node(f"{loc}/nodes/od")
    assert server.emulator.tpu.get_node(f"{loc}/nodes/pre")["schedulingConfig"] == {"preemptible": True}
    with pytest.raises(UsageError, match="cannot be queued"):
        cloud.create_queued_resource(request("q", provisioning="preemptible", queued=True))


def test_host_count_follows_the_catalogue(cloud):
    assert len(cloud.create_node(request("e", "v4-32")).hosts) == 4
    assert len(cloud.create_node(request("one", "v4-8")).hosts) == 1


def test_queued_resource_goes_accepted_waiting_provisioning_active(cloud, server):
    server.emulator.world.set_faults(None, provisioning_delay=0.15)
    created = cloud.create_queued_resource(request("q1", queued=True, valid_until_seconds=600))
    assert created.queued_resource_state in ("ACCEPTED", "WAITING_FOR_RESOURCES")
    assert created.phase is SlicePhase.QUEUED
    seen = []
    ready = wait_for_slice(cloud, "q1", timeout=10,
                           on_change=lambda s: seen.append((s.queued_resource_state, s.node_state)))
    assert ready.phase is SlicePhase.READY and len(ready.hosts) == 2
    assert seen[-1] == ("ACTIVE", "READY")
    order = ["ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    states = [q for q, _ in seen]
    assert states == sorted(states, key=order.index)  # never backwards
    assert {"WAITING_FOR_RESOURCES", "PROVISIONING"} <= set(states)
    assert ("PROVISIONING", "CREATING") in seen
    qr = server.emulator.tpu.get_queued_resource(f"projects/{PROJECT}/locations/{ZONE}/queuedResources/q1")
    assert qr["spot"] == {} and qr["queueingPolicy"] == {"validUntilDuration": "600s"}


def test_list_slices_is_two_calls_and_joins_nodes_with_queued_resources(cloud):
    cloud.create_node(request("direct", "v4-8"))
    cloud.create_queued_resource(request("queued", "v4-8", queued=True))
    wait_for_slice(cloud, "queued", timeout=10)
    before = cloud.api_calls
    slices = cloud.list_slices(PROJECT, ZONE)
    assert cloud.api_calls - before == 2
    assert set(slices) == {"direct", "queued"}
    assert slices["direct"].queued_resource_state is None
    assert slices["queued"].queued_resource_state == "ACTIVE"
    assert all(s.phase is SlicePhase.READY for s in slices.values())
    assert cloud.list_slices(PROJECT, "europe-west4-a") == {}
    assert [s.name for s in cloud.list_nodes(PROJECT, ZONE)] == ["direct", "queued"]
    assert [s.name for s in cloud.list_queued_resources(PROJECT, ZONE)] == ["queued"]


def test_delete_slice_removes_node_and_queued_resource_and_is_idempotent(cloud):
    cloud.create_queued_resource(request("q", "v4-8", queued=True))
    wait_for_slice(cloud, "q", timeout=10)
    cloud.create_node(request("d", "v4-8"))
    cloud.delete_slice(PROJECT, ZONE, "q")
    cloud.delete_slice(PROJECT, ZONE, "d")
    assert cloud.list_slices(PROJECT, ZONE) == {}
    assert cloud.get_slice(PROJECT, ZONE, "q").phase is SlicePhase.GONE
    cloud.delete_slice(PROJECT, ZONE, "q")  # nothing left: still fine
    cloud.delete_node(PROJECT, ZONE, "never-existed")


def test_missing_resources_raise_not_found(cloud):
    with pytest.raises(NotFoundError, match="getting node nope: NotFound"):
        cloud.get_node(PROJECT, ZONE, "nope")
    with pytest.raises(NotFoundError):
        cloud.get_queued_resource(PROJECT, ZONE, "nope")


def test_creating_twice_is_a_conflict(cloud):
    cloud.create_node(request("twice", "v4-8"))
    with pytest.raises(ConflictError, match="already exists"):
        cloud.create_node(request("twice", "v4-8"))
    cloud.create_queued_resource(request("qtwice", "v4-8", queued=True))
    with pytest.raises(ConflictError, match="already exists"):
        cloud.create_queued_resource(request("qtwice", "v4-8", queued=True))


def test_invalid_requests_are_cloud_errors_on_one_line(cloud):
    with pytest.raises(CloudError) as err:
        cloud.create_node(request("bad", "v4-7"))
    assert "BadRequest" in str(err.value) and "\n" not in str(err.value)


def test_calls_succeed_through_a_high_api_error_rate(cloud, server):
    random.seed(7)
    server.emulator.world.set_faults(api_error_rate=0.4, provisioning_delay=None)
    cloud.create_node(request("flaky", "v4-8"))
    cloud.create_queued_resource(request("qflaky", "v4-8", queued=True))
    assert wait_for_slice(cloud, "qflaky", timeout=10).phase is SlicePhase.READY
    for _ in range(10):
        assert set(cloud.list_slices(PROJECT, ZONE)) == {"flaky", "qflaky"}
    cloud.delete_slice(PROJECT, ZONE, "flaky")
    cloud.delete_slice(PROJECT, ZONE, "qflaky")
    calls = cloud.api_calls
    server.emulator.world.set_faults(api_error_rate=0.0, provisioning_delay=None)
    assert cloud.list_slices(PROJECT, ZONE) == {}
    assert cloud.api_calls == calls + 2
    assert calls > 30  # the retries are counted too


def test_retries_give_up_with_a_cloud_error(server):
    from tpujob.cloud.tpu_api import GcpCloud

    cloud = GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.02,
                                  retry_deadline=0.3)
    server.emulator.world.set_faults(api_error_rate=1.0, provisioning_delay=None)
    with pytest.raises(CloudError, match="gave up after retries: (TooManyRequests|ServiceUnavailable)"):
        cloud.list_slices(PROJECT, ZONE)
    assert cloud.api_calls > 3


def test_stockout_fails_direct_creates_with_stockout_error(cloud, server):
    server.emulator.world.stockout(ZONE, "v4-16", clear=False)
    with pytest.raises(StockoutError, match="no more capacity in the zone"):
        cloud.create_node(request("so", "v4-16"))
    assert cloud.get_slice(PROJECT, ZONE, "so").phase is SlicePhase.GONE
    assert cloud.create_node(request("other", "v4-8")).phase is SlicePhase.READY  # other type
    # Another zone (v4 is offered only in us-central2-b: a v5e there).
    assert cloud.create_node(replace(request("elsewhere", "v5litepod-16"), zone="us-central1-a")).hosts
    server.emulator.world.stockout(ZONE, "v4-16", clear=True)
    assert cloud.create_node(request("so", "v4-16")).phase is SlicePhase.READY


def test_stockout_keeps_queued_resources_waiting_until_it_ends(cloud, server):
    server.emulator.world.stockout(ZONE, None, clear=False)
    cloud.create_queued_resource(request("qs", "v4-8", queued=True))
    deadline = time.monotonic() + 120  # bounds a hang only
    while cloud.get_slice(PROJECT, ZONE, "qs").queued_resource_state != "WAITING_FOR_RESOURCES":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)  # and there it stays
    s = cloud.get_slice(PROJECT, ZONE, "qs")
    assert (s.phase, s.queued_resource_state, s.node_state) == (
        SlicePhase.QUEUED, "WAITING_FOR_RESOURCES", None)
    server.emulator.world.stockout(ZONE, None, clear=True)
    assert wait_for_slice(cloud, "qs", timeout=10).phase is SlicePhase.READY


def test_queued_resource_past_its_valid_until_fails(cloud, server):
    server.emulator.world.stockout(ZONE, None, clear=False)
    cloud.create_queued_resource(request("late", "v4-8", queued=True, valid_until_seconds=1))
    s = wait_for_slice(cloud, "late", timeout=10)
    assert (s.phase, s.queued_resource_state) == (SlicePhase.FAILED, "FAILED")
    # No failedData.error: "no capacity within its constraints" (QueuedResourceState), a capacity miss.
    from tpujob.errors import StockoutError

    assert isinstance(s.failure, StockoutError) and "stateInitiator SERVICE" in str(s.failure)


def test_preempted_node_and_suspended_queued_resource_are_preempted(cloud, server):
    cloud.create_node(request("d", "v4-8"))
    cloud.create_queued_resource(request("q", "v4-8", queued=True))
    wait_for_slice(cloud, "q", timeout=10)
    server.emulator.host_faults.preempt("d")
    server.emulator.host_faults.preempt("q")
    slices = cloud.list_slices(PROJECT, ZONE)
    assert (slices["d"].phase, slices["d"].node_state) == (SlicePhase.PREEMPTED, "PREEMPTED")
    # A queued resource's preempted node is deleted by the service: SUSPENDING, then SUSPENDED.
    assert (slices["q"].phase, slices["q"].queued_resource_state) in (
        (SlicePhase.PREEMPTED, "SUSPENDING"), (SlicePhase.PREEMPTED, "SUSPENDED"))
    assert slices["q"].node_state in ("DELETING", None)
    cloud.delete_slice(PROJECT, ZONE, "q")
    cloud.delete_slice(PROJECT, ZONE, "d")
    assert cloud.list_slices(PROJECT, ZONE) == {}


def test_host_keys_come_from_guest_attributes(cloud):
    cloud.create_node(request("k", "v4-16"))
    assert cloud.host_keys(PROJECT, ZONE, "k") == {0: [], 1: []}  # hosts switched off


def test_several_slices_are_one_slice_to_read_key_and_delete(cloud):
    made = cloud.create_node(request("m", "v4-16", slices=2))
    assert (made.name, made.phase, [h.index for h in made.hosts]) == ("m", SlicePhase.READY, [0, 1, 2, 3])
    assert sorted(cloud.list_slices(PROJECT, ZONE)) == ["m-0", "m-1"]  # Google's multislice node names
    assert sorted(cloud.host_keys(PROJECT, ZONE, "m", slices=2)) == [0, 1, 2, 3]  # as the hosts are numbered
    cloud.delete_slice(PROJECT, ZONE, "m", slices=2)
    assert cloud.list_slices(PROJECT, ZONE) == {}
    assert cloud.get_slice(PROJECT, ZONE, "m", slices=2).phase == SlicePhase.GONE
