"""8 sweeps at once (separate processes) over 32 jobs (twice a sweep's 16 act workers) while
preemptions land: one new slice per preemption, no duplicate, no orphan.

On 2 cores this is one of the slowest e2e tests (about a minute): every process checks every RUNNING
job over SSH, so the concurrent rounds are kept to the two that matter (the 32 creates, and the
round the preemptions land in); the in-process sweeps after them only finish what was started.
"""

from __future__ import annotations

import random
import threading

import pytest
from reconcile_helpers import (
    ZONE,
    assert_consistent,
    assert_no_orphans,
    finish,
    node_ref,
    reconciler,
    record_many,
    requeue_processes,
    resources,
)

from tpujob.names import slice_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

JOBS, SWEEPS, VICTIMS = 32, 8, 10


def concurrent_round(inject=None, after_seconds=3.0) -> None:
    processes = requeue_processes(SWEEPS)
    timer = threading.Timer(after_seconds, inject) if inject else None
    if timer:
        timer.start()
    results = finish(processes, timeout=300)
    if timer:
        timer.join()
    for code, _, err in results:
        assert code == 0, err


def converge(ctx, done, rounds=10) -> None:
    rec = reconciler(ctx)
    for _ in range(rounds):
        jobs = ctx.store.list_jobs(include_ended=True)
        if all(done(j) for j in jobs):
            return
        rec.sweep()
    raise AssertionError(f"not converged: {sorted((j.id, j.state, j.attempt) for j in jobs if not done(j))}")


def test_eight_sweeps_over_thirty_two_jobs_with_preemptions(ctx, local_cloud, project, tmp_path):
    jobs = record_many(ctx, tmp_path, JOBS)
    concurrent_round()  # eight processes race to create the 32 slices
    converge(ctx, lambda j: j.state == "RUNNING")
    again = [(j.id, [e.message for e in ctx.store.events(j.id)]) for j in ctx.store.list_jobs() if j.attempt != 1]
    assert again == []
    assert_no_orphans(ctx, local_cloud, project)

    victims = set(random.Random(4).sample([j.id for j in jobs], VICTIMS))
    slices = {i: ctx.store.current_attempt(i).slice_name for i in victims}

    def preempt():
        for job_id in sorted(victims):
            local_cloud.preempt(node_ref(project, ZONE, slices[job_id]))

    concurrent_round(inject=preempt)  # the preemptions land while eight sweeps run
    converge(ctx, lambda j: j.state == "RUNNING" and j.preemptions == (j.id in victims))

    for job in ctx.store.list_jobs():
        expected = 1 if job.id in victims else 0
        assert (job.preemptions, job.attempt) == (expected, expected + 1), job.id
        assert_consistent(ctx, job)
    assert_no_orphans(ctx, local_cloud, project)


PREEMPTED_JOBS = 32


def test_eight_parallel_sweeps_over_preempted_jobs_create_one_slice_each(ctx, local_cloud, project, tmp_path):
    """Every job preempted at once, then eight `tpujob requeue` processes at the same moment, each
    acting on its jobs in parallel threads (TPUJOB_SWEEP_WORKERS, default 16), with the default
    backoff: each job gets exactly one new slice, from whichever sweep took its lease first, and
    runs again on it."""
    jobs = record_many(ctx, tmp_path, PREEMPTED_JOBS, backoff_seconds=None, min_run_seconds=0)
    converge(ctx, lambda j: j.state == "RUNNING")  # parallel act: one sweep starts them all
    for job in jobs:
        local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name),
                            grace_seconds=0)

    results = finish(requeue_processes(SWEEPS), timeout=300)
    for code, _, err in results:
        assert code == 0, err
    acted = [int(out.split(" active, ")[1].split(" acted on")[0]) for _, out, _ in results]
    assert sum(acted) >= PREEMPTED_JOBS  # every job was acted on by some sweep
    # A create that met a transient error under this load (the sweep's retry_after), or a job
    # whose act gave up waiting for the store's write lock (SQLite's busy timeout, with 8 x 16
    # workers on two cores; seen once in a full run), is the next sweep's to take: still one
    # new slice per job, whoever makes it. The preempted job reads RUNNING until a sweep has
    # seen its slice gone, so it is not done before its second attempt.
    converge(ctx, lambda j: j.state == "RUNNING" and j.attempt == 2)

    for job in ctx.store.list_jobs():
        assert [(a.number, a.end_reason) for a in ctx.store.attempts(job.id)] == [(1, "preempted"), (2, None)], (
            job.id, [e.message for e in ctx.store.events(job.id)][-8:], [err for _, _, err in results if err])
        assert (job.state, job.preemptions, job.flaps) == ("RUNNING", 1, 0), job.id
        assert_consistent(ctx, job)
    found = resources(local_cloud, project)
    assert sorted(found) == sorted(("nodes", ZONE, slice_name(j.id, 2, ctx.store.store_tag)) for j in jobs)
    assert_no_orphans(ctx, local_cloud, project)
