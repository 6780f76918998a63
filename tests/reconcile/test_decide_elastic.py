"""decide for an elastic multislice job (tpu.slices {min: 1, max: 2}): a lost slice of two keeps
the other training, a notice waits to see which slice goes, and the missing slice is asked for,
followed, dropped on a failure and taken on once READY."""

from dataclasses import replace

from tpujob.reconcile.actions import (
    ClearUnhealthy,
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
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import HostObservation, JobView, Observation, Program, SliceCondition
from tpujob.store.states import TRANSITIONS, State

ELASTIC = Policy(max_preemptions=2, max_failures=1, max_nan=1, backoff_seconds=10, min_slices=1, max_slices=2)
FIXED = replace(ELASTIC, min_slices=2)
RUN = HostObservation(Program.RUNNING)
SIGTERMED = HostObservation(Program.EXITED, ELASTIC.preempted_exit_code)


def running(**kw) -> JobView:
    base = dict(state=State.RUNNING, attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=1,
                in_state_seconds=3600.0, slices=2)
    return JobView(**{**base, **kw})


def moves(actions) -> list[State]:
    return [a.to for a in actions if isinstance(a, Move)]


def test_one_slice_of_two_lost_keeps_the_other_training_at_once():
    lost = Observation(slice=SliceCondition.LOST, lost_slices=(1,))
    actions = decide(running(), lost, ELASTIC)
    assert actions[:4] == [StopProgram(survivors=True), EndAttempt("preempted"), DeleteSlice(lost_only=True),
                           Count("preemptions")]
    assert moves(actions) == [State.RECOVERING] and "on with the 1 left" in actions[4].message
    assert actions[5:] == [StartAttempt(keep_survivors=True), SetUp()]
    assert State.SETTING_UP in TRANSITIONS[State.RECOVERING]  # what StartAttempt then moves to


def test_the_whole_attempt_goes_when_too_few_are_left_not_elastic_or_the_budget_is_spent():
    every = Observation(slice=SliceCondition.LOST, lost_slices=(0, 1))
    for job, policy, seen in ((running(), ELASTIC, every),
                              (running(), FIXED, Observation(slice=SliceCondition.LOST, lost_slices=(1,))),
                              (running(preemptions=2), ELASTIC,
                               Observation(slice=SliceCondition.LOST, lost_slices=(1,)))):
        actions = decide(job, seen, policy)
        assert DeleteSlice() in actions and StartAttempt(keep_survivors=True) not in actions, actions


def test_a_notice_waits_within_the_grace_to_see_which_slice_goes():
    notice = Observation(slice=SliceCondition.READY, hosts=(SIGTERMED, SIGTERMED))
    first = decide(running(), notice, ELASTIC)
    assert len(first) == 1 and isinstance(first[0], MarkUnhealthy)
    assert decide(running(unhealthy_seconds=30.0), notice, ELASTIC) == []
    late = decide(running(unhealthy_seconds=ELASTIC.unhealthy_grace_seconds + 1), notice, ELASTIC)
    assert EndAttempt("preempted") in late and DeleteSlice() in late  # no slice read lost: all of it
    assert EndAttempt("preempted") in decide(running(), notice, FIXED)  # not elastic: at once


def test_a_running_attempt_short_of_slices_grows_back_and_takes_them_on_once_ready():
    short = running(slices=1)
    healthy = Observation(slice=SliceCondition.READY, hosts=(RUN,))
    assert decide(short, healthy, ELASTIC) == [GrowSlices()]
    assert decide(running(), healthy, ELASTIC) == []  # all slices: nothing to grow
    assert decide(short, replace(healthy, growth="creating"), ELASTIC) == []
    assert decide(short, replace(healthy, growth="failed", growth_error="stockout"), ELASTIC) \
        == [DropGrowth("stockout")]
    assert decide(replace(short, growth_failed_seconds=5.0), healthy, ELASTIC) == []  # within the backoff
    assert decide(replace(short, growth_failed_seconds=11.0), healthy, ELASTIC) == [GrowSlices()]
    ready = decide(short, replace(healthy, growth="ready"), ELASTIC)
    assert ready[:2] == [StopProgram(), EndAttempt("resized")] and moves(ready) == [State.RECOVERING]
    assert ready[3:] == [StartAttempt(grow=True), SetUp()]
    marked = decide(replace(short, unhealthy_seconds=3.0), healthy, ELASTIC)
    assert marked == [ClearUnhealthy(), GrowSlices()]
