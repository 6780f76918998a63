"""decide: job + observation + policy -> actions. Pure: no I/O, no clock, no store.

Every state move a sweep makes is a `Move` (or a `StartAttempt`) returned here: act carries the
actions out, in order, under the job's lease, and what it learns on the way (a create refused,
a setup script failing, the program launched) comes back as an observation for the next
decision, never as a move of act's own. So the whole policy is one table-tested function.
Here: one handler per state; how an attempt's end spends a budget is budgets.py's, an elastic
job's shrink and growth elastic.py's, both called from here only.
"""

from __future__ import annotations

from typing import Callable

from tpujob.reconcile import elastic
from tpujob.reconcile.actions import (
    Action,
    ClearUnhealthy,
    Count,
    CreateSlice,
    DeleteSlice,
    EndAttempt,
    Launch,
    MarkUnhealthy,
    Move,
    NodeRefused,
    ResetCount,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.budgets import spend, spend_bad_host, spend_capacity_miss, spend_failure, spend_preemption
from tpujob.reconcile.deaths import exit_meaning, first_died
from tpujob.reconcile.maintenance import maintenance_reason
from tpujob.reconcile.observation import (
    HostObservation,
    JobView,
    Observation,
    Program,
    Setup,
    SliceCondition,
)
from tpujob.reconcile.policy import Policy
from tpujob.runtime import contract
from tpujob.runtime.contract import RunDirStatus
from tpujob.store.states import AttemptEnd, EndReason, State

# How long past the setup timeout a sweep waits for the hosts' own word on a setup that ran over
# (setup.sh ends it at the timeout and says so) before ending the attempt without it: as long
# as a step's SSH round waits past its timeout (hosts/program.SETUP_GRACE).
SETUP_ANSWER_GRACE_SECONDS = 30.0
# How long a RUNNING attempt's VM may read STOPPING (its program saving in the notice) before it
# counts as lost anyway: past Standard's 120 s notice (Spot's is 30 s; compute.v1 discovery,
# Scheduling.skipGuestOsShutdown), counted from the first sweep that saw it, with a sweep's margin.
STOPPING_LIMIT_SECONDS = 180.0


# --- the decision -------------------------------------------------------------------------------

def decide(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    handler = _BY_STATE.get(job.state)
    if handler is None:
        return []
    actions = handler(job, obs, policy)
    if job.over_budget is not None and not any(isinstance(a, Move) and a.to == State.SUCCEEDED for a in actions):
        return _budget_reached(job, obs)  # a run that just succeeded is a success, whatever it cost
    return actions


def _budget_reached(job: JobView, obs: Observation) -> list[Action]:
    """A cost cap reached: the checkpoint signal and its grace (StopProgram), the slice freed
    (unless kept), FAILED (budget): no other attempt starts (docs/scheduler.md, budgets)."""
    attempt_open = job.state in (State.PROVISIONING, State.SETTING_UP, State.RUNNING)
    actions: list[Action] = [StopProgram()] if job.state == State.RUNNING else []
    if attempt_open:
        actions.append(EndAttempt(AttemptEnd.BUDGET))
    if (attempt_open or obs.holds_slice) and not job.keep_slice:
        actions.append(DeleteSlice())
    return actions + [Move(State.FAILED, job.over_budget or "budget reached", EndReason.BUDGET)]


def _refused(obs: Observation) -> list[Action]:
    """The cloud refused the create for good: asking again every sweep would loop forever."""
    actions: list[Action] = [EndAttempt(AttemptEnd.REFUSED), DeleteSlice()]
    if obs.slice == SliceCondition.NO_QUOTA:
        return actions + [Move(State.FAILED, f"quota exhausted: {obs.refusal}", EndReason.NO_CAPACITY)]
    return actions + [Move(State.FAILED, f"the cloud refused the slice: {obs.refusal}", EndReason.USER_ERROR)]


def _other_placement(job: JobView, other_region: bool, other_zone: bool = False) -> bool:
    """Whether a placement other than the current one is left (in another region, or zone)."""
    here = job.regions[job.placement] if other_region and job.regions else None
    zone = job.zones[job.placement] if other_zone and job.zones else None
    return any(i != job.placement and i not in job.blocked_placements
               and (here is None or job.regions[i] != here) and (zone is None or job.zones[i] != zone)
               for i in range(job.placements))


def _freed(obs: Observation) -> list[Action]:
    return [DeleteSlice()] if obs.holds_slice else []


def _unavailable(job: JobView, obs: Observation) -> list[Action]:
    """The zone does not offer the accelerator (or a reservation it needs), or this project may
    not use the zone at all (scope "zone"): no retry can change that, the next placement may
    (skipping those already refused); with none left, the spec is what is wrong."""
    why = f"this placement is refused: {obs.refusal}"
    whole_zone = obs.scope == "zone"
    end = EndAttempt(AttemptEnd.LOCATION_DENIED if whole_zone else AttemptEnd.UNAVAILABLE)
    if _other_placement(job, other_region=False, other_zone=whole_zone):
        return [end, *_freed(obs), Move(State.RECOVERING, f"{why}; trying the next placement"),
                StartAttempt(next_placement=True)]
    return [end, *_freed(obs), Move(State.FAILED, why, EndReason.USER_ERROR)]


def _no_quota(job: JobView, obs: Observation) -> list[Action] | None:
    """A spent quota: a zonal one (PerProjectPerZone, "in zone Z") says nothing of the region's
    other zones, a regional one (or one of unknown scope) nothing of another region's. None:
    no such placement is left (the job ends)."""
    zonal = obs.scope == "zone"
    if not _other_placement(job, other_region=not zonal, other_zone=zonal):
        return None
    where = "another zone" if zonal else "another region"
    return [EndAttempt(AttemptEnd.NO_ZONE_QUOTA if zonal else AttemptEnd.NO_QUOTA), *_freed(obs),
            Move(State.RECOVERING, f"quota exhausted: {obs.refusal}; trying a placement in {where}"),
            StartAttempt(next_placement=True)]


def _pending(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    return [StartAttempt()]


def _provisioning(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    phase = obs.slice
    if phase == SliceCondition.READY:
        ready: list[Action] = [Move(State.SETTING_UP, "slice READY"), SetUp()]
        return [ResetCount("capacity_misses")] + ready if job.capacity_misses else ready
    if phase in (SliceCondition.LOST, SliceCondition.STOPPING):  # no program yet: nothing to save
        return spend_preemption(job, policy, "slice lost while provisioning")
    if phase == SliceCondition.UNAVAILABLE:
        return _unavailable(job, obs)
    if phase == SliceCondition.NO_QUOTA and (elsewhere := _no_quota(job, obs)) is not None:
        return elsewhere
    if phase in (SliceCondition.REFUSED, SliceCondition.NO_QUOTA):
        return _refused(obs)
    if phase == SliceCondition.STOCKOUT:
        # A queued resource that ended FAILED for capacity says why in its failedData.
        return spend_capacity_miss(job, policy, f"queued resource failed: {obs.refusal}" if obs.holds_slice
                                   else "zone stocked out")
    # PROVISIONING state counts from the request: for a queued resource, that is the queue wait.
    if phase == SliceCondition.QUEUED and job.in_state_seconds > policy.queue_timeout_seconds:
        if job.placements > 1:
            queued = f"queued for {job.in_state_seconds / 3600:.1f} h without capacity"
            return spend_capacity_miss(job, policy, queued)
        return []  # keep our place in the only queue we have
    # The node's own age, not the state's: a node that got capacity after hours in the queue has
    # only just started provisioning.
    if (phase == SliceCondition.PROVISIONING and obs.provisioning_seconds is not None
            and obs.provisioning_seconds > policy.provision_timeout_seconds):
        stuck = f"slice stuck provisioning for {obs.provisioning_seconds / 60:.0f} min"
        return spend_capacity_miss(job, policy, stuck)
    if phase == SliceCondition.GONE:
        # A crash between opening the attempt and creating its slice, or a create that failed
        # transiently: issue it again (idempotent: the name is the attempt's).
        return [CreateSlice()]
    return []


def _setting_up(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    if obs.launched is not None:
        return [Move(State.RUNNING, f"program launched on {obs.launched} hosts")]
    if obs.slice in (SliceCondition.LOST, SliceCondition.GONE, SliceCondition.STOPPING):
        return spend_preemption(job, policy, "slice lost during setup")
    if obs.slice != SliceCondition.READY:
        return []
    if obs.ssh_refused is not None:
        return _ssh_refused(job, obs.ssh_refused)
    maintenance = maintenance_reason(obs, policy.maintenance_lead_seconds)
    if maintenance:
        return spend_preemption(job, policy, f"{maintenance}: slice replaced before the program starts")
    if obs.setup_error is not None:
        return spend_failure(job, policy, AttemptEnd.SETUP_FAILED, f"setup failed: {obs.setup_error}",
                             EndReason.SETUP_FAILED)
    if job.unhealthy_seconds is not None and job.unhealthy_seconds > policy.unhealthy_grace_seconds:
        # Marked by act when setup could not reach a host: one that died there never answers.
        return spend_preemption(job, policy, f"hosts unreachable during setup for {job.unhealthy_seconds:.0f} s")
    # The hosts end a setup at its timeout themselves (setup.sh) and say so: this is the
    # backstop for hosts that never do, so it waits for their answer a while longer.
    if job.in_state_seconds > policy.setup_timeout(job.hosts) + SETUP_ANSWER_GRACE_SECONDS:
        took = job.in_state_seconds
        return spend_failure(job, policy, AttemptEnd.SETUP_FAILED, "setup still running after "
                             + (f"{took:.0f} s" if took < 120 else f"{took / 60:.0f} min"), EndReason.SETUP_FAILED)
    return _setup_under_way(job, obs.setup, obs.setup_cache)


def _setup_under_way(job: JobView, hosts: tuple[Setup, ...], cache: str | None = None) -> list[Action]:
    """Setup runs detached on the hosts: launch once it is done on every one, start it where it
    is not (idempotent on the hosts: one setup per attempt and host), else wait for it."""
    if hosts and all(h == Setup.DONE for h in hosts):
        return [Launch(cache)]
    if not hosts or any(h in (Setup.ABSENT, Setup.UNREACHABLE) for h in hosts):
        return [SetUp()]  # act marks hosts it cannot reach unhealthy
    return [ClearUnhealthy()] if job.unhealthy_seconds is not None else []


def _ssh_refused(job: JobView, why: str) -> list[Action]:
    """The hosts answered SSH and refused this node's login (its key not on the slice yet, OS
    Login without the role, an account that may not act as the attempt's user). In a lab any
    node may sweep any job: what one node cannot do says nothing of the job or its slice, so
    nothing is ended, counted or replaced; the node reports its own problem (act) and the next
    sweep, by it or by another node, tries again."""
    return [NodeRefused(why)]


def _succeeded(job: JobView, why: str) -> list[Action]:
    """The run succeeded. Its slice goes before the move: a lab's admission counts a SUCCEEDED
    job's chips as free, and another node's sweep may admit a job into them at once, while
    Google would still be deleting this slice (over the project's real quota). A sweep that
    stops between the delete and the move left the attempt ended SUCCEEDED: the next one
    finishes from there (`_running`), never re-running a run that succeeded."""
    ended = [] if job.last_end == AttemptEnd.SUCCEEDED else [EndAttempt(AttemptEnd.SUCCEEDED)]
    return [*ended, *([] if job.keep_slice else [DeleteSlice()]), Move(State.SUCCEEDED, why)]


def _running(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    if job.last_end == AttemptEnd.SUCCEEDED:
        return _succeeded(job, "the run succeeded (a sweep ended its attempt, then stopped before the move)")
    run = obs.run_dir or RunDirStatus()
    if run.state == contract.STATE_SUCCEEDED and not any(h.program == Program.RUNNING for h in obs.hosts):
        # The program said so in the run dir: done, whatever became of the hosts since (a
        # successful run is never re-run, even when a host is unreachable or the slice is gone).
        return _succeeded(job, f"status.json: succeeded at step {run.step}")
    if job.evict is not None:
        # The checkpoint signal and its grace (StopProgram), as on a maintenance notice; the slice
        # is freed for the higher band and the job waits for quota again, no budget spent.
        return [StopProgram(), EndAttempt(AttemptEnd.EVICTED), Count("evictions"), DeleteSlice(),
                Move(State.QUEUED, f"evicted: {job.evict}")]
    if elastic.shrinks(job, obs, policy):
        return elastic.shrink(job, obs, policy)
    if obs.slice == SliceCondition.GONE and job.run_limit_reached:
        # Its flex-start VMs were deleted at max_run_duration, as Google does: the run ended, no
        # preemption spent; a new slice at once, the program resuming from its checkpoint.
        return [EndAttempt(AttemptEnd.PREEMPTED), DeleteSlice(),
                Move(State.RECOVERING, "slice gone at its max_run_duration (flex-start VMs are deleted then): "
                                       "not a preemption, next attempt now")]
    if obs.slice in (SliceCondition.LOST, SliceCondition.GONE):
        # Spent as a preemption either way (a new slice, within max_preemptions); the words say
        # which it was: a slice the cloud failed or stopped is not called preempted.
        why = "slice gone" if obs.slice == SliceCondition.GONE else \
            f"slice lost, not preempted ({obs.lost_why})" if obs.lost_why else "slice preempted"
        return spend_preemption(job, policy, why)
    if obs.slice == SliceCondition.STOPPING:
        return _stopping(job, policy, run)
    if obs.slice != SliceCondition.READY:
        return []
    hosts = obs.hosts
    refused = next((h.refusal or "hosts refused tpujob's SSH key" for h in hosts if h.program == Program.REFUSED), None)
    if refused is not None:
        return _ssh_refused(job, refused)
    codes = [h.exit_code for h in hosts if h.program == Program.EXITED]
    # status.json's verdict counts as host 0's exit code (it is what host 0 exits with).
    codes += {contract.STATE_NAN: [policy.nan_exit_code], contract.STATE_PREEMPTED: [policy.preempted_exit_code],
              contract.STATE_FAILED: [run.exit_code or 1]}.get(run.state or "", [])
    hung = run.heartbeat_age is not None and run.heartbeat_age > policy.heartbeat_timeout_seconds
    gone = [i for i, h in enumerate(hosts) if h.program in (Program.UNREACHABLE, Program.MISSING)]
    unhealthy = bool(gone) or not hosts or hung
    if any(c == policy.nan_exit_code for c in codes):
        return spend(job, policy, "nan_restarts", spent_message=f"NaN loss; NaN budget of {policy.max_nan} spent",
                     again_message="NaN loss: slice suspect, moving to new hardware")
    if any(c == policy.preempted_exit_code for c in codes):
        # The program checkpointed on a preemption notice; the slice goes next (of an elastic
        # job: which one, once it reads lost, says what to keep).
        waiting = elastic.await_lost_slice(job, policy)
        if waiting is not None:
            return waiting
        return spend_preemption(job, policy, "program stopped on a preemption notice")
    first = first_died(hosts)
    if first is not None and first[1].bad_host:
        return spend_bad_host(job, policy, first[0], first[1].bad_host)
    failed = [c for c in codes if c != 0]
    said = f" (status.json: {run.message})" if run.state == contract.STATE_FAILED and run.message else ""
    fatal = [c for c in failed if c in policy.fatal_exit_codes]
    if fatal:
        return spend_failure(job, policy, AttemptEnd.FAILED, f"program exited {fatal[0]}{exit_meaning(fatal[0])}"
                             f"{said}: a code or config error, not retried", EndReason.USER_ERROR, retry=False)
    if failed and gone:
        # A host that stopped answering (or lost its program with no exit code) takes its peers
        # down with it: their collectives abort (SIGABRT, "connection reset"). Their exits are
        # that host's death, a lost slice, never the program's failure (which would spend
        # max_failures on a dead machine). A host that answers again says how it ended, and
        # the next round decides on every host's word.
        return _unhealthy(job, policy, hosts, run, False, first, peer_exit=failed[0])
    if failed:
        code = failed[0]
        if not said and first is not None and first[1].program == Program.EXITED:
            # No status.json saying why: the words of the host that died first.
            code = first[1].exit_code if first[1].exit_code else code
            said = f" on host {first[0]}: {first[1].said}"
        return spend_failure(job, policy, AttemptEnd.FAILED, f"program exited {code}{exit_meaning(code)}{said}",
                             EndReason.USER_ERROR)
    if hosts and len(codes) == len(hosts):
        return _succeeded(job, "program exited 0 on every host")
    maintenance = maintenance_reason(obs, policy.maintenance_lead_seconds)
    if maintenance:
        # A checkpoint request (SIGTERM, then the grace), as on a preemption notice; the slice is
        # replaced and the move counts as a preemption.
        return [StopProgram(), *spend_preemption(job, policy,
                                                  f"{maintenance}: checkpoint requested, slice replaced")]
    why_hung = _hang(hosts, run, policy)
    if why_hung is not None:
        return spend(job, policy, "hangs", spent_message=f"program hung: {why_hung}; hang budget of "
                     f"{policy.max_hangs} spent",
                     again_message=f"program hung: {why_hung}; hang {job.hangs + 1} of {policy.max_hangs} "
                                   "allowed, stacks captured before the stop, new slice")
    if unhealthy:
        return _unhealthy(job, policy, hosts, run, hung, first)
    healthy: list[Action] = [ClearUnhealthy()] if job.unhealthy_seconds is not None else []
    return healthy + (elastic.grow(job, obs, policy) or [])


def _stopping(job: JobView, policy: Policy, run: RunDirStatus) -> list[Action]:
    """A VM in its shutdown (a preempted Spot VM's notice): the program may be writing its
    SIGTERM checkpoint, and deleting the VM would cut it short. Left alone (marked, so that the
    wait is counted) until it reads stopped (LOST), the program says it stopped on the notice,
    or it has read STOPPING past any notice (STOPPING_LIMIT_SECONDS)."""
    if run.state == contract.STATE_PREEMPTED:
        return spend_preemption(job, policy, "program stopped on a preemption notice")
    if job.unhealthy_seconds is None:
        return [MarkUnhealthy("VM stopping (a preemption notice): its program may be saving")]
    if job.unhealthy_seconds <= STOPPING_LIMIT_SECONDS:
        return []
    return spend_preemption(job, policy, f"VM still stopping {job.unhealthy_seconds:.0f} s after it was seen so")


def _unhealthy(job: JobView, policy: Policy, hosts: tuple[HostObservation, ...], run: RunDirStatus, hung: bool,
               first: tuple[int, HostObservation] | None, peer_exit: int | None = None) -> list[Action]:
    """A host gone (or a stale heartbeat): marked, re-checked through the grace, then a lost
    slice. `peer_exit`: the code a peer's program exited with meanwhile (the gone host's doing)."""
    peer = f"; a peer's program exited {peer_exit}{exit_meaning(peer_exit)}" if peer_exit is not None else ""
    if job.unhealthy_seconds is None:
        return [MarkUnhealthy(_unhealthy_why(hosts, run, hung) + peer)]
    if job.unhealthy_seconds <= policy.unhealthy_grace_seconds:
        return []
    if hung:
        return spend_preemption(job, policy, f"program hung: heartbeat {run.heartbeat_age:.0f} s old, "
                                             f"unhealthy for {job.unhealthy_seconds:.0f} s")
    if peer:
        lost = f"{peer} (taken down by the lost host)"
    else:
        lost = (f"; host {first[0]}'s program ended without an exit code: {first[1].said}"
                if first is not None and first[1].program == Program.MISSING else "")
    gone = f"hosts unreachable or program missing for {job.unhealthy_seconds:.0f} s{lost}"
    return spend_preemption(job, policy, gone)


def _unhealthy_why(hosts: tuple[HostObservation, ...], run: RunDirStatus, hung: bool) -> str:
    """Which hosts did not answer or lost their program, and a heartbeat gone stale."""
    parts = [f"host {i} {'did not answer' if h.program == Program.UNREACHABLE else 'has no program'}"
             for i, h in enumerate(hosts) if h.program in (Program.UNREACHABLE, Program.MISSING)]
    if not hosts:
        parts.append("no host observed")
    if hung:
        parts.append(f"heartbeat {run.heartbeat_age:.0f} s old")
    return "; ".join(parts[:4] + ([f"{len(parts) - 4} more"] if len(parts) > 4 else []))


def _hang(hosts: tuple[HostObservation, ...], run: RunDirStatus, policy: Policy) -> str | None:
    """Why a program alive on every host is hung, or None. A host that died or cannot be
    reached is not a hang (the unhealthy path replaces the slice after its grace). Ages are
    the freshest any host reports: one host's silence is not the program's."""
    if not hosts or any(h.program != Program.RUNNING for h in hosts):
        return None
    timeout = policy.heartbeat_timeout_seconds
    if run.heartbeat_age is not None and run.heartbeat_age > timeout:
        return f"heartbeat {run.heartbeat_age:.0f} s old (heartbeat_timeout_seconds {timeout:.0f})"
    progress = [h.progress_age for h in hosts if h.progress_age is not None]
    if progress and min(progress) > timeout:
        steps = [h.step for h in hosts if h.step is not None]
        at = f" at step {max(steps)}" if steps else ""
        return (f"no progress{at} for {min(progress):.0f} s while the heartbeat beats on "
                f"(heartbeat_timeout_seconds {timeout:.0f})")
    silent = [h.log_age for h in hosts if h.log_age is not None]
    if policy.hang_seconds is not None and len(silent) == len(hosts) and min(silent) > policy.hang_seconds:
        return f"no log output on any host for {min(silent):.0f} s (run.hang_seconds {policy.hang_seconds:.0f})"
    return None


def _recovering(job: JobView, obs: Observation, policy: Policy) -> list[Action]:
    if job.in_state_seconds < policy.backoff(job):
        return []
    if job.reuse_slice and obs.slice == SliceCondition.READY:
        return [StartAttempt(reuse_slice=True), SetUp()]
    actions: list[Action] = []
    if obs.slice not in (SliceCondition.GONE,):
        actions.append(DeleteSlice())
    # After a capacity miss the next placement gets its turn; after a preemption the job stays
    # where it last had capacity.
    return actions + [StartAttempt(next_placement=job.capacity_misses > 0 and job.placements > 1)]


_BY_STATE: dict[State, Callable[[JobView, Observation, Policy], list[Action]]] = {
    State.PENDING: _pending,
    State.PROVISIONING: _provisioning,
    State.SETTING_UP: _setting_up,
    State.RUNNING: _running,
    State.RECOVERING: _recovering,
}

