"""The lab's scheduler end to end against the emulator (docs/scheduler.md): a high-band job
waiting for the quota evicts a low-band one, which checkpoints on the stop's signal, waits
QUEUED, and goes on in a new attempt once the chips are free. Real client, real SSH, real host
processes."""

from __future__ import annotations

import pytest
from reconcile_helpers import ZONE, assert_no_orphans, host_root, reconciler, running, spec_text, wait_for_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# Checkpoints on SIGTERM (the stop's signal) and exits 75, the runtime's "preempted".
CHECKPOINTS_ON_SIGTERM = ("echo \"$TPUJOB_ATTEMPT\" >> /mnt/ran; trap 'echo checkpoint; exit 75' TERM; "
                          "while :; do sleep 0.2; done")


def _record(ctx, tmp_path, name, band, command="sleep 600"):
    from tpujob.service import jobs

    path = tmp_path / f"{name}.yaml"
    path.write_text(spec_text(name, command=command) + f"priority: {band}\n")
    return jobs.record(ctx, str(path))[0]


def _sweep_until(rec, ctx, job_id, done, rounds=40):
    for _ in range(rounds):
        rec.sweep()
        job = ctx.store.get(job_id)
        if done(job):
            return job
    raise AssertionError("\n".join(f"{e.kind}: {e.message}" for e in ctx.store.events(job_id)))


def test_a_high_job_evicts_a_low_one_which_checkpoints_and_resumes(cli, ctx, local_cloud, project, tmp_path):
    assert cli("quota", "set", "v4", "4").code == 0  # one v4-8
    low = _record(ctx, tmp_path, "low", "low", CHECKPOINTS_ON_SIGTERM)
    assert low.state == "QUEUED"
    rec = reconciler(ctx)
    low = _sweep_until(rec, ctx, low.id, running)
    first = ctx.store.current_attempt(low.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, first, 0) / "mnt/ran") == "1\n"

    high = _record(ctx, tmp_path, "high", "high")
    rec.sweep()  # the low job has run under the minimum run time: the high one waits
    assert (ctx.store.get(high.id).state, ctx.store.get(low.id).state) == ("QUEUED", "RUNNING")
    assert "1st in band high" in cli("show", str(high.id)).out

    # It has run 11 minutes (its state's start moved back: nobody waits ten minutes in a test).
    ctx.store.update(low.id, state_since=ctx.store.clock() - 660)
    rec.sweep()
    evicted = ctx.store.get(low.id)
    assert (evicted.state, evicted.evictions, evicted.preemptions, evicted.failures) == ("QUEUED", 1, 0, 0)
    assert ctx.store.attempts(low.id)[0].end_reason == "evicted"
    # The stop's SIGTERM, and the program stopped within the grace (its trap "checkpointed").
    stop_log = (ctx.settings.home / "logs" / f"{low.id:06d}" / "attempt-1" / "host-0.log").read_text()
    assert '"state": "stopped"' in stop_log
    assert ctx.store.get(high.id).state in ("PROVISIONING", "SETTING_UP", "RUNNING")  # in the same sweep
    _sweep_until(rec, ctx, high.id, running)
    assert "quota: 4/4 v4 chips" in cli("show", str(low.id)).out

    assert cli("delete", str(high.id)).code == 0
    low = _sweep_until(rec, ctx, low.id, running)
    second = ctx.store.current_attempt(low.id).slice_name
    assert (low.attempt, low.evictions) == (2, 1) and second != first
    assert wait_for_file(host_root(local_cloud, project, ZONE, second, 0) / "mnt/ran") == "2\n"
    assert cli("delete", str(low.id)).code == 0
    assert_no_orphans(ctx, local_cloud, project)
