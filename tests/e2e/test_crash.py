"""A sweep killed by SIGKILL at each crash point (TPUJOB_CRASH_AT) is followed by sweeps that
converge to the end state an uncrashed sweep reaches: RUNNING on exactly one live slice, no
orphan, attempts and events consistent, the program launched once per attempt."""

from __future__ import annotations

import time

import pytest

from reconcile_helpers import (  # noqa: F401 - fixtures
    ZONE, assert_consistent, assert_no_orphans, ctx, finish, host_root, node_ref, project, reconciler, record,
    requeue_processes, running, sweep_until, wait_for_file,
)
from tpujob.reconcile.sweep import CRASH_POINTS

pytestmark = pytest.mark.slow

LEASE = 1.0  # the dead sweep's lease must expire for the next sweep to act
COMMAND = 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 600'
# Where each crash point is reached: from a new job (whose node comes up READY at its create, so
# one sweep goes on to launch it), or from a preemption.
SCENARIO = {"provisioning": "new", "slice-requested": "new", "launched": "new",
            "slice-deleted": "preempted", "moved": "preempted"}


def test_every_crash_point_has_a_scenario():
    assert set(SCENARIO) == set(CRASH_POINTS)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_sweep_killed_at_a_crash_point_converges(point, ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, command=COMMAND)
    rec = reconciler(ctx)
    scenario = SCENARIO[point]
    if scenario == "preempted":
        sweep_until(ctx, job.id, running, rec=rec)
        local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name))

    [(code, out, err)] = finish(requeue_processes(1, env_extra={"TPUJOB_CRASH_AT": point,
                                                                "TPUJOB_LEASE_SECONDS": str(LEASE)}))
    assert code == -9, (out, err)
    time.sleep(LEASE + 0.2)

    job = sweep_until(ctx, job.id, running, rec=rec)
    expected_attempt = 2 if scenario == "preempted" else 1
    assert (job.attempt, job.preemptions, job.failures) == (expected_attempt, expected_attempt - 1, 0)
    assert_consistent(ctx, job)
    assert_no_orphans(ctx, local_cloud, project)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    ran = host_root(local_cloud, project, ZONE, slice_name, 0) / "mnt/ran"
    assert wait_for_file(ran) == f"{expected_attempt}\n"
    time.sleep(0.3)
    assert ran.read_text() == f"{expected_attempt}\n", "the program was launched twice"
