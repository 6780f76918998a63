"""decide's rules for an elastic multislice job (tpu.slices {min, max}): train on the slices left
when some are lost, and grow back to all of them once capacity returns. Pure, like decide.

A lost slice of an elastic attempt ends it (a preemption, counted), deletes that slice only and
opens the next attempt at once on the others, from the checkpoint the notice wrote. While an
attempt has fewer slices than max, the sweep asks for the missing ones; once they are READY the
program checkpoints (SIGTERM, as on a notice) and the next attempt runs on all of them. A growth
that fails (a stockout) is dropped and tried again after the backoff.
"""

from __future__ import annotations

from tpujob.reconcile.actions import (
    Action,
    Count,
    DeleteSlice,
    DropGrowth,
    EndAttempt,
    GrowSlices,
    MarkUnhealthy,
    Move,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.observation import JobView, Observation, SliceCondition
from tpujob.reconcile.policy import Policy
from tpujob.store.states import AttemptEnd, State


def shrinks(job: JobView, obs: Observation, policy: Policy) -> bool:
    """A lost slice the job trains on without: elastic, some slices lost, at least min left,
    and the preemption budget not spent."""
    kept = job.slices - len(obs.lost_slices)
    return (policy.elastic and obs.slice == SliceCondition.LOST and bool(obs.lost_slices)
            and policy.min_slices <= kept < job.slices and job.preemptions + 1 <= policy.max_preemptions)


def shrink(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    lost = ", ".join(map(str, obs.lost_slices))
    kept = job.slices - len(obs.lost_slices)
    plural = "s" if len(obs.lost_slices) > 1 else ""
    return [
        StopProgram(survivors=True), EndAttempt(AttemptEnd.PREEMPTED), DeleteSlice(lost_only=True),
        Count("preemptions"),
        Move(State.RECOVERING, f"slice{plural} {lost} of {job.slices} lost; preemption {job.preemptions + 1} of "
                               f"{policy.max_preemptions} allowed; elastic ({policy.min_slices} to "
                               f"{policy.max_slices} slices): on with the {kept} left, from the last checkpoint"),
        StartAttempt(keep_survivors=True), SetUp(),
    ]


def await_lost_slice(job: JobView, policy: Policy) -> list[Action] | None:
    """The program checkpointed on a notice while every slice still reads READY (a node reads
    READY until its hosts are down): wait, within the unhealthy grace, to see which slice goes
    rather than give up the others. None: not elastic, or waited long enough (lost as a whole)."""
    if not policy.elastic or job.slices <= policy.min_slices:
        return None
    if job.unhealthy_seconds is None:
        return [MarkUnhealthy("program stopped on a preemption notice; waiting to see which slice goes")]
    return [] if job.unhealthy_seconds < policy.unhealthy_grace_seconds else None


def grow(job: JobView, obs: Observation, policy: Policy) -> list[Action] | None:
    """What a healthy running attempt does about slices it lacks; None: nothing to do."""
    if not policy.elastic or job.slices >= policy.max_slices:
        return None
    if obs.growth == "ready":
        return [StopProgram(), EndAttempt(AttemptEnd.RESIZED),
                Move(State.RECOVERING, f"{policy.max_slices - job.slices} more slice(s) READY: checkpointed, "
                                       f"on with {policy.max_slices} slices"),
                StartAttempt(grow=True), SetUp()]
    if obs.growth == "failed":
        return [DropGrowth(obs.growth_error)]
    if obs.growth == "creating":
        return None
    if job.growth_failed_seconds is not None and job.growth_failed_seconds < policy.backoff_seconds:
        return None
    return [GrowSlices()]
