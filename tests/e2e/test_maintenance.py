"""Google's maintenance of a slice, end to end against the emulator: `tpujob emulator maintenance`
announces it (Node.upcomingMaintenance, then health UNHEALTHY_MAINTENANCE); `tpujob requeue`
asks the program to checkpoint (SIGTERM with the stop's grace), replaces the slice and counts a
preemption. Real client, real SSH, real host processes."""

from __future__ import annotations

import json

import pytest
from reconcile_helpers import ZONE, assert_no_orphans, host_root, node_ref, record, running, sweep_until, wait_for_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Exits 75 (the runtime's "preempted") once it has "checkpointed" on SIGTERM.
CHECKPOINTS_ON_SIGTERM = ("echo \"$TPUJOB_ATTEMPT\" >> /mnt/ran; trap 'echo checkpoint; exit 75' TERM; "
                          "while :; do sleep 0.2; done")


def _show(cli, job_id) -> dict:
    shown = cli("show", str(job_id), "--json")
    assert shown.code == 0, shown.err
    return json.loads(shown.out)


@pytest.mark.parametrize("after, said", [
    (60, "scheduled maintenance window opens in "),  # within the sweep interval (300 s)
    (0, "slice under maintenance (health UNHEALTHY_MAINTENANCE"),
])
def test_maintenance_checkpoints_and_replaces_the_slice(cli, ctx, local_cloud, project, tmp_path, after, said):
    job = record(ctx, tmp_path, command=CHECKPOINTS_ON_SIGTERM)
    job = sweep_until(ctx, job.id, running)
    first = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, first, 0) / "mnt/ran") == "1\n"

    announced = cli("emulator", "maintenance", node_ref(project, ZONE, first), "--in", after)
    assert announced.code == 0, announced.err
    if after == 0:  # the window opens at once: wait until the node says so
        from tpujob.clients import make_cloud

        cloud = make_cloud(ctx.settings)
        sweep_until(ctx, job.id, lambda j: cloud.get_slice(project, ZONE, first).health == "UNHEALTHY_MAINTENANCE"
                    or j.state != "RUNNING", rec=_NoSweep())
    result = cli("requeue")
    assert result.code == 0, result.err
    shown = _show(cli, job.id)
    assert shown["preemptions"] == 1 and shown["state"] in ("PROVISIONING", "SETTING_UP", "RUNNING")
    assert [(a["number"], a["end_reason"]) for a in shown["attempts"]][0] == (1, "preempted")
    moved = [e["message"] for e in shown["events"] if said in e["message"]]
    assert len(moved) == 1 and "preemption 1 of 5 allowed" in moved[0]
    if after:  # the program was asked to checkpoint and stopped within the grace
        log = (ctx.settings.home / "logs").rglob("host-0.log")
        assert any('"state": "stopped"' in p.read_text() for p in log)
    job = sweep_until(ctx, job.id, running)
    second = ctx.store.current_attempt(job.id).slice_name
    assert second != first
    assert wait_for_file(host_root(local_cloud, project, ZONE, second, 0) / "mnt/ran") == "2\n"
    assert_no_orphans(ctx, local_cloud, project)


class _NoSweep:
    def sweep(self, ids):
        pass
