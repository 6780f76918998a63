"""A sweep killed by SIGKILL at each crash point (TPUJOB_CRASH_AT) is followed by sweeps that
converge to the end state an uncrashed sweep reaches: RUNNING on exactly one live slice, no
orphan, attempts and events consistent, the program launched once per attempt."""

from __future__ import annotations

import contextlib
import time

import pytest
from reconcile_helpers import (
    FALLBACK_ZONE,
    V5E,
    ZONE,
    assert_consistent,
    assert_no_orphans,
    finish,
    host_root,
    node_ref,
    reconciler,
    record,
    requeue_processes,
    resources,
    running,
    sweep_until,
    wait_for_file,
)

from tpujob.faults import CRASH_POINTS

pytestmark = pytest.mark.slow

LEASE = 3.0  # the dead sweep's lease must expire for the next sweep to act; under 3 s a loaded
# machine let the lease lapse before the crash point (the fallback scenario makes two creates first)
COMMAND = 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 600'
# Where each crash point is reached: from a new job (whose node comes up READY at its create, so
# one sweep goes on to launch it), from a preemption, or from a stockout of the primary zone (the
# next attempt moves to the fallback).
SCENARIO = {"placement": "fallback", "provisioning": "new", "slice-requested": "new", "launched": "new",
            "slice-deleted": "preempted", "moved": "preempted", "setup-started": "new"}


def test_every_crash_point_has_a_scenario():
    assert set(SCENARIO) == set(CRASH_POINTS)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_sweep_killed_at_a_crash_point_converges(point, ctx, local_cloud, project, tmp_path):
    scenario = SCENARIO[point]
    if scenario == "fallback":
        with stocked_out(local_cloud, STOCKED_OUT):
            job = record(ctx, tmp_path, accelerator=V5E, zone=STOCKED_OUT, fallback=[FALLBACK_ZONE], command=COMMAND)
            job = crash_then_run(point, ctx, job)
            # A crash between choosing the fallback and opening its attempt must not skip it:
            # the next sweep moves to the fallback, not back to the stocked-out primary.
            assert [(a.zone, a.end_reason) for a in ctx.store.attempts(job.id)] == [
                (STOCKED_OUT, "no_capacity"), (FALLBACK_ZONE, None)]
        assert (job.placement, job.zone, job.preemptions, job.failures) == (1, FALLBACK_ZONE, 0, 0)
        assert [e.message for e in ctx.store.events(job.id) if e.kind == "fallback"] == [
            f"moving to {V5E} in {FALLBACK_ZONE}"]
        assert_consistent(ctx, job)
        assert_no_orphans(ctx, local_cloud, project, (STOCKED_OUT, FALLBACK_ZONE))
        assert_launched_once(local_cloud, project, FALLBACK_ZONE, ctx.store.current_attempt(job.id).slice_name, 2)
        return
    job = record(ctx, tmp_path, command=COMMAND)
    rec = reconciler(ctx)
    if scenario == "preempted":
        sweep_until(ctx, job.id, running, rec=rec)
        local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name))

    job = crash_then_run(point, ctx, job, rec)
    expected_attempt = 2 if scenario == "preempted" else 1
    assert (job.attempt, job.preemptions, job.failures) == (expected_attempt, expected_attempt - 1, 0)
    assert_consistent(ctx, job)
    assert_no_orphans(ctx, local_cloud, project)
    assert_launched_once(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, expected_attempt)


def test_a_sweep_killed_in_a_long_setup_frees_the_job_within_its_lease(ctx, local_cloud, project, tmp_path):
    """A sweep SIGKILLed while the job's setup runs on its host (detached: the sweep may have
    left it already): its lease lapses after TPUJOB_LEASE_SECONDS, not after the setup's
    timeout (15 min), and the setup it left running goes on. The next sweeps observe that one,
    find it done and launch: the setup ran once, the program once."""
    job = record(ctx, tmp_path, command=COMMAND, setup='echo "$TPUJOB_ATTEMPT" >> /mnt/setup-ran; sleep 6')
    [sweep] = requeue_processes(1, env_extra={"TPUJOB_LEASE_SECONDS": str(LEASE)})
    ran = _setup_started(ctx, local_cloud, project, job.id)
    sweep.kill()
    sweep.communicate(timeout=30)
    time.sleep(LEASE + 0.2)
    job = sweep_until(ctx, job.id, running, timeout=90)
    assert (job.attempt, job.preemptions, job.failures) == (1, 0, 0)
    assert ran.read_text() == "1\n", "the setup ran twice"
    assert_consistent(ctx, job)
    assert_no_orphans(ctx, local_cloud, project)
    assert_launched_once(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, 1)


def _setup_started(ctx, local_cloud, project: str, job_id: int, timeout=90.0):
    """Host 0's /mnt/setup-ran once the job's setup has written it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attempt = ctx.store.current_attempt(job_id)
        if attempt is not None and ctx.store.get(job_id).state == "SETTING_UP":
            with contextlib.suppress(Exception):  # the node may not be listed yet
                ran = host_root(local_cloud, project, ZONE, attempt.slice_name, 0) / "mnt/setup-ran"
                if ran.exists():
                    return ran
        time.sleep(0.1)
    raise AssertionError(f"job {job_id}'s setup never started: {ctx.store.get(job_id).state}")


STOCKED_OUT = "us-east5-c"  # offers v5e; a zone no other test uses: the stockout touches only this test


@contextlib.contextmanager
def stocked_out(local_cloud, zone: str):
    local_cloud.stockout(zone)
    try:
        yield
    finally:
        local_cloud.stockout(zone, clear=True)


def crash_then_run(point: str, ctx, job, rec=None):
    """One `tpujob requeue` killed at `point`, then sweeps (after its lease expired) until RUNNING."""
    [(code, out, err)] = finish(requeue_processes(1, env_extra={"TPUJOB_CRASH_AT": point,
                                                                "TPUJOB_LEASE_SECONDS": str(LEASE)}))
    assert code == -9, (out, err)
    time.sleep(LEASE + 0.2)
    return sweep_until(ctx, job.id, running, rec=rec or reconciler(ctx))


def assert_launched_once(local_cloud, project: str, zone: str, slice_name: str, attempt: int) -> None:
    ran = host_root(local_cloud, project, zone, slice_name, 0) / "mnt/ran"
    assert wait_for_file(ran) == f"{attempt}\n"
    time.sleep(0.3)
    assert ran.read_text() == f"{attempt}\n", "the program was launched twice"


def test_a_sweep_killed_between_a_success_and_its_move_is_finished_by_the_next(ctx, local_cloud, project, tmp_path):
    """Killed after ending a succeeded attempt and deleting its slice, before the move to
    SUCCEEDED (the slice goes first, so a lab's admission never counts chips Google still holds):
    the job is still RUNNING with no slice. The next sweep reads the attempt's end, not the absent
    slice: SUCCEEDED, run once, no preemption spent, nothing left at the cloud."""
    job = record(ctx, tmp_path, command='echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 1')
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, running, rec=rec)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, slice_name, 0) / "mnt/ran") == "1\n"
    time.sleep(2)  # the program has exited: the next sweep ends the attempt succeeded
    [(code, out, err)] = finish(requeue_processes(1, env_extra={"TPUJOB_CRASH_AT": "slice-deleted",
                                                                "TPUJOB_LEASE_SECONDS": str(LEASE)}))
    assert code == -9, (out, err)
    assert ctx.store.get(job.id).state == "RUNNING"
    assert ctx.store.current_attempt(job.id).end_reason == "succeeded"
    time.sleep(LEASE + 0.2)
    rec.sweep()
    done = ctx.store.get(job.id)
    assert (done.state, done.attempt, done.preemptions, done.failures) == ("SUCCEEDED", 1, 0, 0)
    assert resources(local_cloud, project) == []
    assert_no_orphans(ctx, local_cloud, project)


def test_a_sweep_killed_after_a_failed_jobs_move_leaves_its_slice_to_the_next(ctx, local_cloud, project, tmp_path):
    """Killed right after moving a job to FAILED (its program's error, no retry left), before
    deleting its slice, which a failure keeps until then: ended jobs are not swept, so the slice
    was left to nobody (seen in the soak). The next sweep lists the zones of recently ended jobs
    too and deletes it; the job stays FAILED, run once."""
    job = record(ctx, tmp_path, command='echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 1; exit 3')
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, running, rec=rec)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, slice_name, 0) / "mnt/ran") == "1\n"
    time.sleep(2)  # the program has exited: the next sweep's first move is to FAILED
    [(code, out, err)] = finish(requeue_processes(1, env_extra={"TPUJOB_CRASH_AT": "moved",
                                                                "TPUJOB_LEASE_SECONDS": str(LEASE)}))
    assert code == -9, (out, err)
    assert ctx.store.get(job.id).state == "FAILED"
    assert ("nodes", ZONE, slice_name) in resources(local_cloud, project)
    time.sleep(LEASE + 0.2)
    rec.sweep()
    assert resources(local_cloud, project) == []
    assert (ctx.store.get(job.id).state, ctx.store.get(job.id).attempt) == ("FAILED", 1)
    assert [e.message for e in ctx.store.events(job.id) if e.kind == "slice"][-1] == (
        f"deleted slice {slice_name}, left behind when the job ended (the sweep that ended it stopped "
        "before deleting it)")
    assert_no_orphans(ctx, local_cloud, project)


def test_a_preemption_mid_setup_converges_and_no_setup_runs_twice(ctx, local_cloud, project, tmp_path):
    """Setup runs detached: a slice preempted while it runs ends the attempt as a preemption
    (the sweep holds no worker on it), the next attempt sets up its new slice once and runs."""
    job = record(ctx, tmp_path, command=COMMAND, setup='echo "$TPUJOB_ATTEMPT" >> /mnt/setup-ran; sleep 6',
                 min_run_seconds=0)
    rec = reconciler(ctx)
    rec.sweep([job.id])  # the slice, and its setup started
    assert _setup_started(ctx, local_cloud, project, job.id).read_text() == "1\n"
    first = ctx.store.current_attempt(job.id).slice_name
    local_cloud.preempt(node_ref(project, ZONE, first))
    job = sweep_until(ctx, job.id, running, rec=rec, timeout=120)
    assert (job.attempt, job.preemptions, job.failures) == (2, 1, 0)
    assert [a.end_reason for a in ctx.store.attempts(job.id)] == ["preempted", None]
    second = ctx.store.current_attempt(job.id).slice_name
    assert (host_root(local_cloud, project, ZONE, second, 0) / "mnt/setup-ran").read_text() == "2\n"
    assert_consistent(ctx, job)
    assert_no_orphans(ctx, local_cloud, project)
    assert_launched_once(local_cloud, project, ZONE, second, 2)
