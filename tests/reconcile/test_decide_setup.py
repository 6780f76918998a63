"""decide on a setup that runs detached on the hosts (issue 26): the sweep starts it, observes it
in later rounds, and launches the program once it is done on every host, without a worker
waiting on it."""

import pytest

from tpujob.reconcile.actions import (
    ClearUnhealthy,
    Count,
    DeleteSlice,
    EndAttempt,
    Launch,
    Move,
    NodeRefused,
    SetUp,
    StopProgram,
)
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import JobView, Observation, Setup, SliceCondition
from tpujob.store.states import EndReason, State

P = Policy(max_preemptions=2, max_failures=1, max_nan=1, backoff_seconds=10, max_capacity_retries=3)
RUNNING, DONE, ABSENT, GONE = Setup.RUNNING, Setup.DONE, Setup.ABSENT, Setup.UNREACHABLE


def job(**kw):
    base = dict(attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=2, in_state_seconds=5.0)
    return JobView(state=State.SETTING_UP, **{**base, **kw})


def seen(*hosts, **kw):
    return Observation(slice=SliceCondition.READY, setup=tuple(hosts), **kw)


CASES = [
    ("not observed yet: start it", job(), Observation(SliceCondition.READY), [SetUp()]),
    ("running on every host: wait, holding nothing", job(), seen(RUNNING, RUNNING), []),
    ("done on one host, running on the other: wait", job(), seen(DONE, RUNNING), []),
    ("done on every host: launch", job(), seen(DONE, DONE), [Launch()]),
    ("not started on a host: start it (a no-op where it runs)", job(), seen(RUNNING, ABSENT), [SetUp()]),
    ("a host did not answer: set up again (act marks it unhealthy)", job(), seen(RUNNING, GONE), [SetUp()]),
    ("running again after an unreachable round: the mark is cleared", job(unhealthy_seconds=20.0),
     seen(RUNNING, RUNNING), [ClearUnhealthy()]),
    ("a host unreachable past the grace: a new slice", job(unhealthy_seconds=600.0), seen(RUNNING, GONE),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.RECOVERING, "hosts unreachable during setup for 600 s; preemption 1 of 2 allowed; ran 0 s, "
                             "under min_run_seconds (600): flap 1, next attempt in 12 s")]),
    ("failed on a host: the attempt fails with the host's words", job(),
     seen(DONE, RUNNING, setup_error="setup on host 1: exit code 3: pip: no such package"),
     [StopProgram(), EndAttempt("setup_failed"), Count("failures"),
      Move(State.RECOVERING, "setup failed: setup on host 1: exit code 3: pip: no such package; retry 1 of 1")]),
    ("just past the setup timeout: the hosts' own answer is awaited", job(in_state_seconds=900 * 1.0625 + 10),
     seen(RUNNING, RUNNING), []),
    ("still running past the setup timeout: failed", job(in_state_seconds=1e6, failures=1), seen(RUNNING, RUNNING),
     [StopProgram(), EndAttempt("setup_failed"), Count("failures"),
      Move(State.FAILED, "setup still running after 16667 min", EndReason.SETUP_FAILED), DeleteSlice()]),
    ("preempted mid-setup: a preemption, not a failure", job(),
     Observation(SliceCondition.LOST, setup=(RUNNING, RUNNING)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.RECOVERING, "slice lost during setup; preemption 1 of 2 allowed; ran 0 s, under "
                             "min_run_seconds (600): flap 1, next attempt in 12 s")]),
    ("the hosts refuse this node's key while observing setup: the job left alone", job(),
     seen(GONE, GONE, ssh_refused="setup on host 0: refused"),
     [NodeRefused("setup on host 0: refused")]),
    ("launched: RUNNING", job(), Observation(SliceCondition.READY, setup=(DONE, DONE), launched=2),
     [Move(State.RUNNING, "program launched on 2 hosts")]),
]


@pytest.mark.parametrize("name,job_,obs_,expected", CASES, ids=[c[0] for c in CASES])
def test_decide_on_a_detached_setup(name, job_, obs_, expected):
    assert decide(job_, obs_, P) == expected
