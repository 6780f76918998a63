"""decide() on hosts that answer SSH and refuse this node's login (its key not on the slice yet,
OS Login without the role): in a lab any node sweeps any job, and what one node cannot do is a
fact about that node. The job is left as it is (NodeRefused: act reports it), never ended,
counted, or replaced (as an unreachable host would be)."""

import pytest

from tpujob.reconcile.actions import MarkUnhealthy, Move, NodeRefused, SetUp
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import HostObservation, JobView, Observation, Program, SliceCondition
from tpujob.store.states import State, is_legal

P = Policy(max_preemptions=20, max_failures=3, max_nan=1, backoff_seconds=10, unhealthy_grace_seconds=120)
WHY = ("hosts refused tpujob's SSH key for user sa_1: OS Login is enabled on project p ...; "
       "fix: grant ... roles/compute.osLogin")
REFUSED = HostObservation(Program.REFUSED, refusal=WHY)
RUN = HostObservation(Program.RUNNING)
GONE = HostObservation(Program.UNREACHABLE)


def job(state, **kw):
    base = dict(attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=2, in_state_seconds=5.0)
    base.update(kw)
    return JobView(state=state, **base)


LEFT = [NodeRefused(WHY)]

CASES = [
    ("setup refused: the job left as it is", job(State.SETTING_UP),
     Observation(slice=SliceCondition.READY, ssh_refused=WHY), LEFT),
    ("setup refused past the setup timeout: still not failed", job(State.SETTING_UP, in_state_seconds=1e6),
     Observation(slice=SliceCondition.READY, ssh_refused=WHY), LEFT),
    # Already marked unhealthy past the grace (as "unreachable" used to be): still no preemption.
    ("setup refused past the unhealthy grace", job(State.SETTING_UP, unhealthy_seconds=500.0),
     Observation(slice=SliceCondition.READY, ssh_refused=WHY), LEFT),
    ("running, one host refuses", job(State.RUNNING),
     Observation(slice=SliceCondition.READY, hosts=(RUN, REFUSED)), LEFT),
    ("running, every host refuses, long past the unhealthy grace", job(State.RUNNING, unhealthy_seconds=1e6),
     Observation(slice=SliceCondition.READY, hosts=(REFUSED, REFUSED)), LEFT),
    # An unreachable host is still what it was: marked, re-checked, replaced after the grace.
    ("running, a host unreachable: marked, not failed", job(State.RUNNING),
     Observation(slice=SliceCondition.READY, hosts=(RUN, GONE)), [MarkUnhealthy("host 1 did not answer")]),
    ("setting up without a refusal goes on", job(State.SETTING_UP),
     Observation(slice=SliceCondition.READY), [SetUp()]),
]


@pytest.mark.parametrize("name,view,observation,expected", CASES, ids=[c[0] for c in CASES])
def test_decide_on_a_refused_key(name, view, observation, expected):
    actions = decide(view, observation, P)
    assert actions == expected
    for action in actions:
        if isinstance(action, Move):
            assert is_legal(view.state, action.to)


def test_a_refused_host_without_its_words_still_says_what_happened():
    actions = decide(job(State.RUNNING), Observation(slice=SliceCondition.READY,
                                                    hosts=(HostObservation(Program.REFUSED),)), P)
    assert actions == [NodeRefused("hosts refused tpujob's SSH key")]
