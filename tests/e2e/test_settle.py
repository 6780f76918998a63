"""`tpujob requeue --settle` (what the cron line runs): a setup runs detached on the hosts, so a
plain sweep leaves the job SETTING_UP and its program would start only at the next cron run;
with --settle the sweep follows that job alone until its setup ends and launches the program."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SPEC = """\
name: {name}
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
setup: "sleep 4"
run: {{command: "sleep 600"}}
"""


def _record(ctx, tmp_path, name: str, setup: str = "sleep 4") -> None:
    """Recorded only, as `create` leaves a job when it returns early: the sweeps start it."""
    from tpujob.service import jobs

    spec = tmp_path / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name).replace("sleep 4", setup))
    jobs.record(ctx, str(spec))


def _state(cli, name: str) -> str:
    return json.loads(cli("show", "--json", name).out)["state"]


def test_a_plain_sweep_leaves_the_setup_running_and_settle_launches_the_program(cli, ctx, tmp_path):
    _record(ctx, tmp_path, "plain")
    assert cli("requeue", "plain").code == 0
    assert _state(cli, "plain") == "SETTING_UP"  # the setup runs on; the next run launches
    _record(ctx, tmp_path, "settled")
    started = time.monotonic()
    result = cli("requeue", "--settle", "60", "settled")
    took = time.monotonic() - started
    assert result.code == 0, result.err
    assert _state(cli, "settled") == "RUNNING"
    assert "; followed 1 setup(s), 1 ended within --settle" in result.out
    assert took < 60  # it ended with the setup, not at the settle time
    events = [e["message"] for e in json.loads(cli("show", "--json", "settled").out)["events"]]
    assert any(m.startswith("setup running on 1 of 1 hosts") for m in events)
    assert any(m == "program launched on 1 hosts" for m in events), events
    for name in ("plain", "settled"):
        assert cli("delete", name).code == 0


def test_settle_gives_up_at_its_time_and_the_next_sweep_goes_on(cli, ctx, tmp_path):
    _record(ctx, tmp_path, "slow", setup="sleep 20")
    started = time.monotonic()
    result = cli("requeue", "--settle", "3", "slow")
    assert result.code == 0 and time.monotonic() - started < 20
    assert "; followed 1 setup(s), 0 ended within --settle" in result.out
    assert _state(cli, "slow") == "SETTING_UP"
    assert cli("delete", "slow").code == 0
