"""decide: job + observation + policy -> actions. Pure: no I/O, no clock, no store.

`act` carries the actions out, in order, under the job's lease. Everything a sweep does is
decided here, so the whole policy is one table-tested function.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from tpujob.store.states import EndReason, State


class SlicePhase(str, Enum):
    ABSENT = "ABSENT"  # no node and no queued resource by the attempt's name
    WAITING = "WAITING"  # queued resource accepted, waiting for capacity
    PROVISIONING = "PROVISIONING"  # capacity found, node being created
    READY = "READY"
    LOST = "LOST"  # preempted, terminated, queued resource FAILED or SUSPENDED
    STOCKOUT = "STOCKOUT"  # the create was refused for capacity


class Program(str, Enum):
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"  # no trace of a launch on the host (fresh host, or wiped)
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class HostStatus:
    program: Program
    exit_code: Optional[int] = None
    step: Optional[int] = None  # the runtime contract's heartbeat, where the program keeps one
    resumed_from: Optional[int] = None


@dataclass(frozen=True)
class RunDir:
    """The current attempt's files in the job's run dir on GCS (read without SSH). Files left by
    an earlier attempt are not this attempt's: the sweep leaves them out."""
    state: Optional[str] = None  # status.json's state (succeeded/failed/preempted/nan); None: still running
    step: Optional[int] = None
    message: str = ""
    exit_code: Optional[int] = None
    heartbeat_age: Optional[float] = None  # seconds since the heartbeat was last rewritten


@dataclass(frozen=True)
class Observation:
    slice: SlicePhase
    hosts: tuple[HostStatus, ...] = ()  # observed only when the slice is READY and a program was launched
    last_step: Optional[int] = None  # from the runtime's status/heartbeat, when known
    setup_error: Optional[str] = None  # the setup script failed on a host (not a connection error)
    run_dir: Optional[RunDir] = None  # only for a RUNNING job whose spec has a run_dir on GCS


@dataclass(frozen=True)
class Policy:
    max_preemptions: int
    max_failures: int
    max_nan: int
    backoff_seconds: float
    queue_timeout_seconds: float = 6 * 3600
    provision_timeout_seconds: float = 30 * 60  # a node stuck CREATING
    setup_timeout_seconds: float = 15 * 60  # per attempt, scaled by host count in `setup_timeout`
    unhealthy_grace_seconds: float = 120
    nan_exit_code: int = 76
    preempted_exit_code: int = 75
    # The runtime rewrites its heartbeat at least every 30 s; ten times that is a hung program
    # (a stuck collective, a dead coordinator), not a slow step.
    heartbeat_timeout_seconds: float = 300

    def setup_timeout(self, hosts: int) -> float:
        # Fan-out is parallel, but installs contend for the same mirrors and buckets.
        return self.setup_timeout_seconds * (1 + hosts / 32)


@dataclass(frozen=True)
class JobView:
    state: State
    attempt: int
    preemptions: int
    failures: int
    nan_restarts: int
    hosts: int
    in_state_seconds: float  # since the last state change
    unhealthy_seconds: Optional[float] = None  # since the slice was first seen unhealthy
    fallbacks_left: int = 0
    keep_slice: bool = False
    reuse_slice: bool = False  # RECOVERING after a program failure: the slice itself is fine


# --- actions ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    pass


@dataclass(frozen=True)
class StartAttempt(Action):
    """Open attempt N+1: create its slice (name derived from job id + N+1) and move to
    PROVISIONING, or, with reuse_slice, keep the current healthy slice and move to SETTING_UP."""
    next_placement: bool = False  # move on to the next fallback zone/accelerator first
    reuse_slice: bool = False


@dataclass(frozen=True)
class CreateSlice(Action):
    """(Re-)issue the create of the current attempt's slice; an existing one is adopted."""


@dataclass(frozen=True)
class DeleteSlice(Action):
    """Delete the current attempt's node and queued resource (they hold quota)."""


@dataclass(frozen=True)
class SetUp(Action):
    """Prepare every host (disks, buckets, sync, setup) and launch the program."""


@dataclass(frozen=True)
class StopProgram(Action):
    pass


@dataclass(frozen=True)
class EndAttempt(Action):
    reason: str


@dataclass(frozen=True)
class Count(Action):
    counter: str  # "preemptions" | "failures" | "nan_restarts"


@dataclass(frozen=True)
class Move(Action):
    to: State
    message: str
    reason: Optional[EndReason] = None


@dataclass(frozen=True)
class MarkUnhealthy(Action):
    pass


@dataclass(frozen=True)
class ClearUnhealthy(Action):
    pass


# --- the decision -------------------------------------------------------------------------------

def decide(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    handler = _BY_STATE.get(job.state)
    return [] if handler is None else handler(job, obs, policy)


def _lost(job: JobView, policy: Policy, why: str) -> list[Action]:
    """The slice is gone or dead: end the attempt, free the quota, go again within budget."""
    actions: list[Action] = [EndAttempt("preempted"), DeleteSlice(), Count("preemptions")]
    if job.preemptions + 1 > policy.max_preemptions:
        return actions + [Move(State.FAILED, f"{why}; preemption budget of {policy.max_preemptions} spent",
                               EndReason.PREEMPTION_BUDGET)]
    return actions + [Move(State.RECOVERING, f"{why}; preemption {job.preemptions + 1} of "
                                             f"{policy.max_preemptions} allowed")]


def _no_capacity(job: JobView, why: str) -> list[Action]:
    actions: list[Action] = [EndAttempt("no_capacity"), DeleteSlice()]
    if job.fallbacks_left > 0:
        return actions + [Move(State.RECOVERING, f"{why}; trying the next fallback"),
                          StartAttempt(next_placement=True)]
    return actions + [Move(State.FAILED, f"{why}; no fallback left", EndReason.NO_CAPACITY)]


def _pending(job, obs, policy):
    return [StartAttempt()]


def _provisioning(job, obs, policy):
    phase = obs.slice
    if phase == SlicePhase.READY:
        return [Move(State.SETTING_UP, "slice READY"), SetUp()]
    if phase == SlicePhase.LOST:
        return _lost(job, policy, "slice lost while provisioning")
    if phase == SlicePhase.STOCKOUT:
        return _no_capacity(job, "zone stocked out")
    if phase == SlicePhase.WAITING and job.in_state_seconds > policy.queue_timeout_seconds:
        if job.fallbacks_left > 0:
            return _no_capacity(job, f"queued for {job.in_state_seconds / 3600:.1f} h without capacity")
        return []  # keep our place in the only queue we have
    if phase == SlicePhase.PROVISIONING and job.in_state_seconds > policy.provision_timeout_seconds:
        return _no_capacity(job, "slice stuck provisioning")
    if phase == SlicePhase.ABSENT:
        # A crash between opening the attempt and creating its slice, or a create that failed
        # transiently: issue it again (idempotent: the name is the attempt's).
        return [CreateSlice()]
    return []


def _setting_up(job, obs, policy):
    if obs.slice in (SlicePhase.LOST, SlicePhase.ABSENT):
        return _lost(job, policy, "slice lost during setup")
    if obs.slice != SlicePhase.READY:
        return []
    if obs.setup_error is not None:
        return _failed(job, policy, "setup_failed", f"setup failed: {obs.setup_error}", EndReason.SETUP_FAILED)
    if job.in_state_seconds > policy.setup_timeout(job.hosts):
        return _failed(job, policy, "setup_failed", f"setup still running after "
                       f"{job.in_state_seconds / 60:.0f} min", EndReason.SETUP_FAILED)
    return [SetUp()]


def _failed(job, policy, attempt_reason: str, why: str, reason: EndReason) -> list[Action]:
    actions: list[Action] = [StopProgram(), EndAttempt(attempt_reason), Count("failures")]
    if job.failures + 1 > policy.max_failures:
        actions.append(Move(State.FAILED, why, reason))
        return actions if job.keep_slice else actions + [DeleteSlice()]
    return actions + [Move(State.RECOVERING, f"{why}; retry {job.failures + 1} of {policy.max_failures}")]


def _running(job, obs, policy):
    run = obs.run_dir or RunDir()
    if run.state == "succeeded" and not any(h.program == Program.RUNNING for h in obs.hosts):
        # The program said so in the run dir: done, whatever became of the hosts since (a
        # successful run is never re-run, even when a host is unreachable or the slice is gone).
        actions = [EndAttempt("succeeded"), Move(State.SUCCEEDED, f"status.json: succeeded at step {run.step}")]
        return actions if job.keep_slice else actions + [DeleteSlice()]
    if obs.slice in (SlicePhase.LOST, SlicePhase.ABSENT):
        return _lost(job, policy, "slice preempted" if obs.slice == SlicePhase.LOST else "slice gone")
    if obs.slice != SlicePhase.READY:
        return []
    hosts = obs.hosts
    codes = [h.exit_code for h in hosts if h.program == Program.EXITED]
    # status.json's verdict counts as host 0's exit code (it is what host 0 exits with).
    codes += {"nan": [policy.nan_exit_code], "preempted": [policy.preempted_exit_code],
              "failed": [run.exit_code or 1]}.get(run.state, [])
    hung = run.heartbeat_age is not None and run.heartbeat_age > policy.heartbeat_timeout_seconds
    unhealthy = any(h.program in (Program.UNREACHABLE, Program.MISSING) for h in hosts) or not hosts or hung
    if any(c == policy.nan_exit_code for c in codes):
        actions: list[Action] = [StopProgram(), EndAttempt("nan"), DeleteSlice(), Count("nan_restarts")]
        if job.nan_restarts + 1 > policy.max_nan:
            return actions + [Move(State.FAILED, f"NaN loss; NaN budget of {policy.max_nan} spent",
                                   EndReason.NAN_BUDGET)]
        return actions + [Move(State.RECOVERING, "NaN loss: slice suspect, moving to new hardware")]
    if any(c == policy.preempted_exit_code for c in codes):
        # The program checkpointed on a preemption notice; the slice goes next.
        return _lost(job, policy, "program stopped on a preemption notice")
    failed = [c for c in codes if c != 0]
    if failed:
        said = f" (status.json: {run.message})" if run.state == "failed" and run.message else ""
        return _failed(job, policy, "failed", f"program exited {failed[0]}{said}", EndReason.USER_ERROR)
    if hosts and len(codes) == len(hosts):
        actions = [EndAttempt("succeeded"), Move(State.SUCCEEDED, "program exited 0 on every host")]
        return actions if job.keep_slice else actions + [DeleteSlice()]
    if unhealthy:
        if job.unhealthy_seconds is None:
            return [MarkUnhealthy()]
        if job.unhealthy_seconds > policy.unhealthy_grace_seconds:
            if hung:
                return _lost(job, policy, f"program hung: heartbeat {run.heartbeat_age:.0f} s old, "
                                          f"unhealthy for {job.unhealthy_seconds:.0f} s")
            return _lost(job, policy, f"hosts unreachable or program missing for "
                                      f"{job.unhealthy_seconds:.0f} s")
        return []
    return [ClearUnhealthy()] if job.unhealthy_seconds is not None else []


def _recovering(job, obs, policy):
    if job.in_state_seconds < policy.backoff_seconds:
        return []
    if job.reuse_slice and obs.slice == SlicePhase.READY:
        return [StartAttempt(reuse_slice=True), SetUp()]
    actions: list[Action] = []
    if obs.slice not in (SlicePhase.ABSENT,):
        actions.append(DeleteSlice())
    return actions + [StartAttempt()]


_BY_STATE = {
    State.PENDING: _pending,
    State.PROVISIONING: _provisioning,
    State.SETTING_UP: _setting_up,
    State.RUNNING: _running,
    State.RECOVERING: _recovering,
}

