"""`requeue` end to end against the emulator: preemption, budgets, fallback, NaN, success, cancel,
a dead host. Real client, real SSH, real host filesystems; each test in a project of its own."""

from __future__ import annotations

import time

import pytest
from reconcile_helpers import (
    FALLBACK_ZONE,
    V5E,
    ZONE,
    assert_no_orphans,
    host_root,
    node_ref,
    reconciler,
    record,
    resources,
    running,
    sweep_until,
    wait_for_file,
)

pytestmark = pytest.mark.slow

ONCE_PER_ATTEMPT = 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 600'


def names(client, project, zones=(ZONE,)):
    return sorted({r[2] for r in resources(client, project, zones)})


def test_a_preempted_job_runs_again_on_a_new_slice_on_every_host(cli, ctx, local_cloud, project, tmp_path):
    # The default backoff (30 s) is not waited after a preemption. The attempt ran seconds, not
    # the default min_run_seconds (600) that would make it a flap: 0 turns the flap rule off.
    job = record(ctx, tmp_path, accelerator="v4-32", command=ONCE_PER_ATTEMPT, backoff_seconds=None,
                 min_run_seconds=0)
    sweep_until(ctx, job.id, running)
    first = ctx.store.current_attempt(job.id).slice_name
    for i in range(4):
        assert wait_for_file(host_root(local_cloud, project, ZONE, first, i) / "mnt/ran") == "1\n", \
            [f"{e.kind}: {e.message}" for e in ctx.store.events(job.id)]

    local_cloud.preempt(node_ref(project, ZONE, first))
    result = cli("requeue")
    assert result.code == 0, result.err
    assert " sweep: 1 active, 1 acted on" in result.out.splitlines()[0]
    after = ctx.store.get(job.id)
    # One sweep: the dead slice is deleted, the next created, set up and launched on every host.
    assert (after.preemptions, after.attempt, after.state) == (1, 2, "RUNNING"), \
        [f"{e.kind}: {e.message}" for e in ctx.store.events(job.id)]
    second = ctx.store.current_attempt(job.id).slice_name
    assert second != first and names(local_cloud, project) == [second]
    for i in range(4):
        assert wait_for_file(host_root(local_cloud, project, ZONE, second, i) / "mnt/ran") == "2\n"
    attempts = ctx.store.attempts(job.id)
    assert [(a.number, a.end_reason) for a in attempts] == [(1, "preempted"), (2, None)]
    assert_no_orphans(ctx, local_cloud, project)


def test_three_preemptions_with_a_budget_of_two_fail_the_job(ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, max_preemptions=2)
    rec = reconciler(ctx)
    for n in range(1, 4):
        sweep_until(ctx, job.id, running, rec=rec)
        local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name))
        job = sweep_until(ctx, job.id, lambda j, n=n: j.preemptions == n, rec=rec)
    assert (job.state, job.end_reason, job.attempt) == ("FAILED", "preemption_budget", 3)
    assert names(local_cloud, project) == []  # the dead slice holds quota: deleted
    rec.sweep()
    assert ctx.store.get(job.id).state == "FAILED"


def test_a_stocked_out_zone_falls_back_to_the_next_one(ctx, local_cloud, project, tmp_path):
    primary = "us-west4-a"  # a zone no other test uses: the stockout touches only this test
    job = record(ctx, tmp_path, accelerator=V5E, zone=primary, fallback=[FALLBACK_ZONE])
    local_cloud.stockout(primary)
    try:
        job = sweep_until(ctx, job.id, running)
    finally:
        local_cloud.stockout(primary, clear=True)
    attempts = ctx.store.attempts(job.id)
    assert [(a.zone, a.end_reason) for a in attempts] == [(primary, "no_capacity"), (FALLBACK_ZONE, None)]
    assert (job.zone, job.placement, job.preemptions) == (FALLBACK_ZONE, 1, 0)
    assert names(local_cloud, project, (primary,)) == []
    assert_no_orphans(ctx, local_cloud, project, (primary, FALLBACK_ZONE))


def test_a_stockout_without_fallback_is_retried_until_capacity_returns(cli, ctx, local_cloud, project, tmp_path):
    zone = "us-south1-a"  # a zone no other test uses: the stockout touches only this test
    job = record(ctx, tmp_path, accelerator=V5E, zone=zone)
    local_cloud.stockout(zone)
    try:
        result = cli("requeue")
        assert result.code == 0 and result.err == ""
        waiting = ctx.store.get(job.id)
        # Before: FAILED no_capacity at the first stockout. Now a capacity miss is retried: the
        # sweep followed its create to the miss and (backoff 0) asked for the next slice, whose
        # create the stockout ends too (a stocked-out create leaves no node behind).
        assert (waiting.state, waiting.capacity_misses, waiting.attempt) == ("PROVISIONING", 1, 2)
        assert names(local_cloud, project, (zone,)) == []  # nothing left holding quota meanwhile
    finally:
        local_cloud.stockout(zone, clear=True)
    job = sweep_until(ctx, job.id, running)
    assert [(a.zone, a.end_reason) for a in ctx.store.attempts(job.id)] == [
        (zone, "no_capacity"), (zone, "no_capacity"), (zone, None)]
    assert job.capacity_misses == 0
    assert_no_orphans(ctx, local_cloud, project, (zone,))


def test_a_queued_resource_waiting_past_the_queue_timeout_moves_to_the_fallback(ctx, local_cloud, project,
                                                                                  tmp_path):
    primary = "us-central1-a"  # a zone no other test uses: the stockout touches only this test
    job = record(ctx, tmp_path, accelerator=V5E, zone=primary, queued=True, fallback=[FALLBACK_ZONE],
                 queue_timeout_seconds=5)  # a loaded machine's first sweep took over 1 s
    rec = reconciler(ctx)
    local_cloud.stockout(primary)
    try:
        rec.sweep([job.id])
        assert ctx.store.get(job.id).state == "PROVISIONING"
        waiting = ctx.store.current_attempt(job.id).slice_name
        assert names(local_cloud, project, (primary,)) == [waiting]  # in the queue, keeping its place
        time.sleep(5.2)
        job = sweep_until(ctx, job.id, running, rec=rec)
    finally:
        local_cloud.stockout(primary, clear=True)
    assert [(a.zone, a.end_reason) for a in ctx.store.attempts(job.id)] == [
        (primary, "no_capacity"), (FALLBACK_ZONE, None)]
    # The abandoned queued resource is deleted, not left to be filled later and forgotten.
    deadline = time.monotonic() + 10
    while names(local_cloud, project, (primary,)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert names(local_cloud, project, (primary,)) == []
    assert_no_orphans(ctx, local_cloud, project, (primary, FALLBACK_ZONE))


def test_a_nan_exit_moves_the_job_to_a_new_slice(ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, command='if [ "$TPUJOB_ATTEMPT" = 1 ]; then exit 76; fi; ' + ONCE_PER_ATTEMPT)
    job = sweep_until(ctx, job.id, lambda j: j.attempt == 2 and j.state == "RUNNING")
    first, second = ctx.store.attempts(job.id)
    assert (first.end_reason, job.nan_restarts, job.preemptions, job.failures) == ("nan", 1, 0, 0)
    assert first.slice_name != second.slice_name  # suspect hardware is not reused
    assert names(local_cloud, project) == [second.slice_name]
    assert wait_for_file(host_root(local_cloud, project, ZONE, second.slice_name, 0) / "mnt/ran") == "2\n"


def test_a_succeeded_job_is_never_run_again(cli, ctx, local_cloud, project, tmp_path):
    from tpujob.service import jobs

    path = tmp_path / "ok.yaml"
    from reconcile_helpers import spec_text

    path.write_text(spec_text("ok", command='echo "$TPUJOB_ATTEMPT" >> /mnt/ran'))
    job, _ = jobs.record(ctx, str(path), keep_slice=True)
    job = sweep_until(ctx, job.id, lambda j: j.state == "SUCCEEDED")
    slice_name = ctx.store.current_attempt(job.id).slice_name
    events = len(ctx.store.events(job.id))
    for args in (("requeue",), ("requeue", str(job.id)), ("requeue", "--all")):
        assert cli(*args).code == 0
    assert len(ctx.store.events(job.id)) == events
    again = ctx.store.get(job.id)
    assert (again.state, again.attempt) == ("SUCCEEDED", 1)
    assert names(local_cloud, project) == [slice_name]  # kept, as asked, and not reused
    assert (host_root(local_cloud, project, ZONE, slice_name, 0) / "mnt/ran").read_text() == "1\n"


def test_a_cancelled_job_is_left_alone_by_sweeps(cli, ctx, local_cloud, project, tmp_path):
    from tpujob.service import jobs

    job = record(ctx, tmp_path)
    sweep_until(ctx, job.id, running)
    jobs.cancel(ctx, str(job.id))
    slice_name = ctx.store.current_attempt(job.id).slice_name
    local_cloud.preempt(node_ref(project, ZONE, slice_name))  # even a dead slice does not wake it
    events = len(ctx.store.events(job.id))
    assert cli("requeue").code == 0
    assert cli("requeue", str(job.id)).code == 0
    after = ctx.store.get(job.id)
    assert (after.state, after.attempt, after.preemptions) == ("CANCELLED", 1, 0)
    assert len(ctx.store.events(job.id)) == events
    assert names(local_cloud, project) == [slice_name]


def test_a_dead_host_is_rechecked_then_treated_as_lost(ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, unhealthy_grace_seconds=1)
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, running, rec=rec)
    first = ctx.store.current_attempt(job.id).slice_name
    local_cloud.kill_host(node_ref(project, ZONE, first), 0)
    rec.sweep([job.id])
    marked = ctx.store.get(job.id)
    # Not lost yet: a blip must not cost a slice.
    assert (marked.state, marked.attempt) == ("RUNNING", 1) and marked.unhealthy_since is not None
    time.sleep(1.2)
    job = sweep_until(ctx, job.id, lambda j: j.attempt == 2 and j.state == "RUNNING", rec=rec)
    assert ctx.store.attempts(job.id)[0].end_reason == "preempted"
    assert any("unreachable" in e.message for e in ctx.store.events(job.id))
    assert names(local_cloud, project) == [ctx.store.current_attempt(job.id).slice_name]
    assert job.unhealthy_since is None


def test_a_host_that_dies_in_setup_is_replaced_after_the_grace_not_the_setup_timeout(ctx, local_cloud, project,
                                                                                      tmp_path):
    import threading

    from reconcile_helpers import spec_text

    from tpujob.service import jobs

    path = tmp_path / "dies-in-setup.yaml"
    # A setup that takes a while, so the host dies under it; the setup timeout (15 min by
    # default) is not what ends the attempt.
    path.write_text(spec_text("dies", unhealthy_grace_seconds=1) + "setup: sleep 3\n")
    job, _ = jobs.record(ctx, str(path))
    rec = reconciler(ctx)
    under_way = threading.Thread(target=rec.sweep, args=([job.id],))
    under_way.start()
    deadline = time.monotonic() + 60
    while ctx.store.get(job.id).state != "SETTING_UP":
        assert time.monotonic() < deadline, ctx.store.get(job.id).state
        time.sleep(0.05)
    first = ctx.store.current_attempt(job.id).slice_name
    local_cloud.kill_host(node_ref(project, ZONE, first), 0)
    under_way.join(timeout=120)
    if ctx.store.get(job.id).unhealthy_since is None:  # setup runs detached: a next sweep finds the host dead
        rec.sweep([job.id])
    marked = ctx.store.get(job.id)
    assert (marked.state, marked.attempt) == ("SETTING_UP", 1) and marked.unhealthy_since is not None
    time.sleep(1.2)
    job = sweep_until(ctx, job.id, lambda j: j.attempt == 2 and j.state == "RUNNING", rec=rec)
    events = [e.message for e in ctx.store.events(job.id)]
    assert any("hosts unreachable during setup for" in m for m in events), events
    # One event for the mark, not one per sweep that found the host dead.
    assert sum("setup will be retried" in m for m in events) == 1, events
    assert ctx.store.attempts(job.id)[0].end_reason == "preempted"
    assert names(local_cloud, project) == [ctx.store.current_attempt(job.id).slice_name]
    assert job.unhealthy_since is None


def test_a_full_local_disk_is_said_and_costs_no_slice(ctx, local_cloud, project, tmp_path):
    """Issue 45: the host log's ENOSPC read as "connection lost", and the slice was replaced
    once the unhealthy grace (here 0 s) passed. /dev/full answers every write with ENOSPC."""
    from tpujob.names import local_log_dir

    job = record(ctx, tmp_path, setup="true", unhealthy_grace_seconds=0)
    logs = ctx.settings.home / local_log_dir(job.id, 1)
    logs.mkdir(parents=True)
    (logs / "host-0.log").symlink_to("/dev/full")
    rec = reconciler(ctx)
    full = f"disk full: cannot write the host log {logs / 'host-0.log'} (free space on this machine)"
    sweep_until(ctx, job.id, lambda j: any(full in e.message for e in ctx.store.events(j.id)), rec=rec)
    for _ in range(3):  # later sweeps meet it again: never a host's fault
        rec.sweep([job.id])
    after = ctx.store.get(job.id)
    assert (after.state, after.attempt, after.unhealthy_since) == ("SETTING_UP", 1, None)
    assert not any("unreachable" in e.message or "connection lost" in e.message for e in ctx.store.events(job.id))
    (logs / "host-0.log").unlink()  # room again: the same slice goes on
    job = sweep_until(ctx, job.id, running, rec=rec)
    assert job.attempt == 1
