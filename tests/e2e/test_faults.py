"""With 20% of API calls failing (429/503), a few `requeue` rounds still bring every job to the
state it deserves."""

from __future__ import annotations

import pytest
from reconcile_helpers import ZONE, assert_consistent, assert_no_orphans, node_ref, reconciler, record

from tpujob.errors import TpujobError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def rounds(ctx, rec, done, limit=40) -> int:
    """Sweeps until `done(jobs)`; a sweep that fails outright is what the next cron run retries."""
    failed = 0
    for _ in range(limit):
        try:
            rec.sweep()
        except TpujobError:
            failed += 1
        if done(ctx.store.list_jobs(include_ended=True)):
            return failed
    seen = [(j.id, j.state, j.end_reason) for j in ctx.store.list_jobs(include_ended=True)]
    raise AssertionError(f"not done: {seen}")


def test_jobs_reach_their_state_with_a_fifth_of_api_calls_failing(ctx, local_cloud, project, tmp_path):
    sleepers = [record(ctx, tmp_path, name=f"sleep{i}") for i in range(3)]
    succeed = [record(ctx, tmp_path, name=f"ok{i}", command="true") for i in range(2)]
    broken = record(ctx, tmp_path, name="broken", command="exit 3")
    rec = reconciler(ctx)
    local_cloud.set_faults(api_error_rate=0.2)
    expected = {**{j.id: ("RUNNING", None) for j in sleepers}, **{j.id: ("SUCCEEDED", None) for j in succeed},
                broken.id: ("FAILED", "user_error")}

    def settled(jobs):
        return all((j.state, j.end_reason) == expected[j.id] for j in jobs)

    rounds(ctx, rec, settled)
    victim = sleepers[0].id
    local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(victim).slice_name))
    rounds(ctx, rec, lambda jobs: settled(jobs) and ctx.store.get(victim).attempt == 2)

    local_cloud.set_faults(api_error_rate=0.0)
    for job in ctx.store.list_jobs(include_ended=True):
        assert_consistent(ctx, job)
    assert ctx.store.get(victim).preemptions == 1
    assert [j.attempt for j in ctx.store.list_jobs(include_ended=True) if j.id != victim] == [1] * 5
    rec.sweep()  # ended jobs' slices were deleted despite the errors: only the sleepers' remain
    assert_no_orphans(ctx, local_cloud, project)
