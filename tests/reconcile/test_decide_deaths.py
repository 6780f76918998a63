"""decide on a program's death: the words of the host that died first, the exit code's meaning,
and a known bad-host line ending the attempt `bad_host` (its own budget, a new slice at once)."""

import pytest

from tpujob.reconcile.actions import Count, DeleteSlice, EndAttempt, MarkUnhealthy, Move, StartAttempt, StopProgram
from tpujob.reconcile.deaths import exit_meaning
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import HostObservation, JobView, Observation, Program, SliceCondition
from tpujob.runtime.contract import RunDirStatus
from tpujob.store.states import TRANSITIONS, EndReason, State

P = Policy(max_preemptions=2, max_failures=1, max_nan=1, backoff_seconds=10, max_bad_hosts=2)
RUN = HostObservation(Program.RUNNING)
BUSY = ("RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process "
        "with pid 4242. Not attempting to load libtpu.so in this process.")


def job(state=State.RUNNING, **kw):
    base = dict(attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=2, in_state_seconds=5.0)
    return JobView(state=state, **{**base, **kw})


def died(code, at, said, bad=None):
    return HostObservation(Program.EXITED, code, ended_at=at, said=said, bad_host=bad)


def ready(*hosts, run=None):
    return Observation(slice=SliceCondition.READY, hosts=tuple(hosts), run_dir=run)


CASES = [
    ("the first host to die speaks, with its signal",
     job(), ready(died(1, 20.0, "peer gone"), died(134, 10.0, "Fatal Python error: Aborted")),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 134 (SIGABRT: Aborted) on host 1: Fatal Python error: Aborted; "
                             "retry 1 of 1")]),
    ("a failure past its budget keeps its words", job(failures=1), ready(died(137, 1.0, "step 7"), RUN),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.FAILED, "program exited 137 (SIGKILL: Killed) on host 0: step 7", EndReason.USER_ERROR),
      DeleteSlice()]),
    ("status.json's own word wins over the log",
     job(), ready(died(1, 1.0, "Traceback ..."), RUN,
                  run=RunDirStatus(state="failed", message="bad data", exit_code=1)),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 1 (status.json: bad data); retry 1 of 1")]),
    ("a bad-host line: the slice is replaced, not retried on",
     job(), ready(RUN, died(1, 3.0, f"Traceback | {BUSY}", BUSY)),
     [StopProgram(), EndAttempt("bad_host"), DeleteSlice(), Count("bad_hosts"),
      Move(State.RECOVERING, f"bad host 1: {BUSY}; bad host 1 of 2 allowed, replacing the slice")]),
    ("a bad-host line from a program gone without an exit code",
     job(), ready(RUN, HostObservation(Program.MISSING, ended_at=3.0, said="x", bad_host="Couldn't open iommu group "
                                                                                         "/dev/vfio/0")),
     [StopProgram(), EndAttempt("bad_host"), DeleteSlice(), Count("bad_hosts"),
      Move(State.RECOVERING, "bad host 1: Couldn't open iommu group /dev/vfio/0; bad host 1 of 2 allowed, "
                             "replacing the slice")]),
    ("the bad-host budget spent", job(bad_hosts=2), ready(died(1, 3.0, BUSY, BUSY), RUN),
     [StopProgram(), EndAttempt("bad_host"), DeleteSlice(), Count("bad_hosts"),
      Move(State.FAILED, f"bad host 0: {BUSY}; bad-host budget of 2 spent", EndReason.BAD_HOST_BUDGET)]),
    ("a program lost without an exit code: marked, then its words with the preemption",
     job(unhealthy_seconds=600, in_state_seconds=3600), ready(RUN, HostObservation(Program.MISSING, ended_at=1.0,
                                                                                   said="Killed")),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "hosts unreachable or program missing for 600 s; host 1's program ended without an "
                             "exit code: Killed; preemption 1 of 2 allowed, next attempt now")]),
    ("lost, first seen", job(), ready(RUN, HostObservation(Program.MISSING, said="Killed")),
     [MarkUnhealthy("host 1 has no program")]),
    # Soak seed 4711: host 0 killed, host 1's JAX aborted once its peer was gone.
    ("a peer aborts after a host stops answering: marked, not a failure",
     job(), ready(HostObservation(Program.UNREACHABLE), died(134, 5.0, "orbax ... async_checkpointer.py")),
     [MarkUnhealthy("host 0 did not answer; a peer's program exited 134 (SIGABRT: Aborted)")]),
    ("the same within the grace: wait for the host's word",
     job(unhealthy_seconds=60), ready(HostObservation(Program.UNREACHABLE), died(134, 5.0, "orbax")), []),
    ("the same past the grace: a lost slice, counted as a preemption",
     job(unhealthy_seconds=130, in_state_seconds=3600),
     ready(HostObservation(Program.UNREACHABLE), died(134, 5.0, "orbax")),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "hosts unreachable or program missing for 130 s; a peer's program exited 134 "
                             "(SIGABRT: Aborted) (taken down by the lost host); preemption 1 of 2 allowed, "
                             "next attempt now")]),
    ("a program gone without an exit code takes its peer down too",
     job(), ready(HostObservation(Program.MISSING, said="Killed"), died(1, 5.0, "connection reset by peer")),
     [MarkUnhealthy("host 0 has no program; a peer's program exited 1")]),
    ("the host answers again with its own exit: the program's failure after all",
     job(unhealthy_seconds=60), ready(died(1, 2.0, "ValueError: bad batch"), died(134, 5.0, "orbax")),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 1 on host 0: ValueError: bad batch; retry 1 of 1")]),
    ("a fatal code is the program's own, whatever a peer's host does",
     job(), ready(HostObservation(Program.UNREACHABLE), died(78, 5.0, "config")),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.FAILED, "program exited 78: a code or config error, not retried",
           EndReason.USER_ERROR), DeleteSlice()]),
    # After a bad host: no backoff (not the program's fault) and never the same slice again.
    ("recovering after a bad host: a new slice at once",
     job(State.RECOVERING, in_state_seconds=0.0, last_end="bad_host"), Observation(SliceCondition.LOST),
     [DeleteSlice(), StartAttempt()]),
]


@pytest.mark.parametrize("name,view,observation,expected", CASES, ids=[c[0] for c in CASES])
def test_decide_on_a_death(name, view, observation, expected):
    actions = decide(view, observation, P)
    assert actions == expected
    for move in (a for a in actions if isinstance(a, Move)):
        assert move.to in TRANSITIONS[view.state]


@pytest.mark.parametrize("code,meaning", [
    (134, " (SIGABRT: Aborted)"), (137, " (SIGKILL: Killed)"), (139, " (SIGSEGV: Segmentation fault)"),
    (143, " (SIGTERM: Terminated)"), (127, " (command not found)"), (3, ""), (None, ""), (255, ""),
])
def test_exit_codes_say_what_they_mean(code, meaning):
    assert exit_meaning(code) == meaning
