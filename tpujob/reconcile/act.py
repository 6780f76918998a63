"""act: carry out decide's actions for one job, in order, under its lease. One handler per
action type, each returning an Outcome (outcome.py). The Actor holds what every handler shares
(the store, the cloud, the hosts) and the handlers that only write the job's own record: its
counters, its moves, the end of its attempt, its health mark. The slice's handlers are in
slice_act.py, the hosts' in host_act.py, an elastic job's in elastic_act.py; the table at the
bottom of Actor names each action type's.

A handler never moves the job itself: what it learned goes back to decide as an observation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tpujob.cloud.base import Cloud, Slice, SliceRequest
from tpujob.errors import AuthError, LocationDenied
from tpujob.faults import crash_point
from tpujob.names import slice_labels
from tpujob.reconcile import elastic_act, host_act, slice_act
from tpujob.reconcile.actions import (
    Action,
    ClearUnhealthy,
    Count,
    CreateSlice,
    DeleteSlice,
    DropGrowth,
    EndAttempt,
    GrowSlices,
    Launch,
    MarkUnhealthy,
    Move,
    NodeRefused,
    ResetCount,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.observe import HostOps
from tpujob.reconcile.outcome import Outcome, done, retry_after
from tpujob.reconcile.policy import capacity_wait, runtime_version, slice_network
from tpujob.spec.stored import spec_of
from tpujob.store.models import Attempt, Job
from tpujob.store.states import Counter, State

if TYPE_CHECKING:
    from tpujob.store.repository import Store


@dataclass
class Turn:
    """One act call's view of the job as its actions change it."""
    job: Job
    attempt: Attempt | None
    slice: Slice | None
    state: State
    counters: dict[Counter, int] = field(default_factory=dict)
    ended: int | None = None  # the attempt an EndAttempt just ended: the next Move says why

    def current(self) -> Attempt:
        """The attempt an action works on: decide asks for such an action only where the job
        has one (RuntimeError, as a bug, where it has none)."""
        if self.attempt is None:
            raise RuntimeError(f"job {self.job.id}: no current attempt to act on")
        return self.attempt


class Actor:
    def __init__(self, store: Store, cloud: Cloud, hosts: HostOps, actor: str, *, ssh_keys: tuple[str, ...],
                 clock: Callable[[], float], metadata: dict[str, str] | None = None, node: str = ""):
        self.store = store
        self.cloud = cloud
        self.hosts = hosts
        self.actor = actor
        self.ssh_keys = ssh_keys
        self.metadata = dict(metadata or {})  # on every node created (enable-oslogin: FALSE, opted out)
        self.clock = clock
        # Credentials or permissions a create was refused for, by job: what `create` (following
        # one job) exits 6 with, naming the fix.
        self.auth_errors: dict[int, AuthError] = {}
        # Zones this project may not use (LOCATION_POLICY_VIOLATED), by job: what `create` exits 6
        # with when the job ends on it, a configuration error naming the zone.
        self.config_errors: dict[int, LocationDenied] = {}
        # Jobs whose hosts refused this node's login this sweep, and why (decide's NodeRefused).
        self.node_problems: dict[int, str] = {}
        self.node = node or actor

    def act(self, job: Job, attempt: Attempt | None, slice_: Slice | None, actions: list[Action]) -> Outcome:
        """The actions in order; the first outcome other than a plain done ends them."""
        turn = Turn(job, attempt, slice_, State(job.state))
        outcome = done()
        for action in actions:
            outcome = self._handlers[type(action)](self, turn, action)
            if outcome.kind != "done" or outcome.observed is not None:
                return outcome
        if turn.counters:
            self.store.update(turn.job.id, **turn.counters)
        return outcome

    # -- one handler per action type -----------------------------------------------------------
    def _count(self, turn: Turn, action: Count) -> Outcome:
        # Applied with the next Move, in its transaction: a crash in between counts nothing.
        turn.counters[action.counter] = getattr(turn.job, action.counter) + 1
        return done()

    def _reset_count(self, turn: Turn, action: ResetCount) -> Outcome:
        turn.counters[action.counter] = 0
        return done()

    def _move(self, turn: Turn, action: Move) -> Outcome:
        with self.store.atomic():  # the move and the ended attempt's cause together
            turn.job = self.store.transition(turn.job.id, turn.state, action.to, action.message,
                                             end_reason=action.reason, owner=self.actor, unhealthy_since=None,
                                             **turn.counters)
            if turn.ended is not None:
                self.store.record_cause(turn.job.id, turn.ended, action.message)
        turn.state, turn.counters, turn.ended = action.to, {}, None
        crash_point("moved")
        return done()

    def _end_attempt(self, turn: Turn, action: EndAttempt) -> Outcome:
        if turn.attempt is not None:
            slice_ = turn.slice
            lost = slice_.lost_slices if slice_ is not None and turn.attempt.slices > 1 else ()
            self.store.end_attempt(turn.job.id, turn.attempt.number, action.reason, lost_slices=lost)
            if lost and slice_ is not None:
                self.store.add_event(turn.job.id, "slice", f"attempt {turn.attempt.number} lost slice"
                                     f"{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of "
                                     f"{turn.attempt.slices}: {slice_.node_state}")
            turn.ended = turn.attempt.number
            host_act.unmount(self, turn, turn.attempt)
        return done()

    # The unhealthy mark: written here only (a Move clears it with the transition, a new
    # attempt starts without it); decide reads its age (JobView.unhealthy_seconds) and judges.
    def mark_unhealthy(self, job: Job, kind: str, event: str) -> None:
        with self.store.atomic():  # the mark and its event together
            self.store.update(job.id, unhealthy_since=self.clock())
            self.store.add_event(job.id, kind, event)

    def clear_unhealthy(self, job: Job) -> None:
        self.store.update(job.id, unhealthy_since=None)

    def _mark_unhealthy(self, turn: Turn, action: MarkUnhealthy) -> Outcome:
        self.mark_unhealthy(turn.job, "health", f"{action.why or 'hosts unreachable or program missing'}; "
                            "re-checking")
        return done()

    def _clear_unhealthy(self, turn: Turn, action: ClearUnhealthy) -> Outcome:
        self.clear_unhealthy(turn.job)
        return done()

    def _node_refused(self, turn: Turn, action: NodeRefused) -> Outcome:
        """This node could not log in on the job's hosts: the sweep's report says so every time
        (`node_problems`), the job's events once (not again while it says the same)."""
        why = f"this node ({self.node}) cannot log in on the hosts: {action.why}; the job is left as it is"
        self.node_problems[turn.job.id] = why
        events = self.store.events(turn.job.id)
        if not events or events[-1].message != why:
            self.store.add_event(turn.job.id, "node", why)
        return retry_after(why)

    # -- what the slice and host handlers share ------------------------------------------------
    def slice_request(self, job: Job, attempt: Attempt, **fields: Any) -> SliceRequest:
        """What a create of the attempt's slice (or of nodes grown for it) asks for: `fields`
        name the nodes."""
        spec = spec_of(job)
        return SliceRequest(
            project=job.project, zone=attempt.zone, accelerator_type=attempt.accelerator,
            runtime_version=runtime_version(spec, attempt.accelerator), provisioning=spec.provisioning,
            labels=slice_labels(job.id, attempt.number),
            # The job's disks: clones made at the first attempt, reused after.
            ssh_keys=self.ssh_keys, data_disks=self.hosts.data_disks(job, attempt), metadata=self.metadata,
            api=spec.api, reservation=spec.reservation, max_run_duration_seconds=spec.max_run_duration_seconds,
            valid_until_seconds=capacity_wait(spec), boot_disk_gb=spec.compute.boot_disk_gb if spec.compute else None,
            **slice_network(spec), **fields)

    # Each handler takes the action of its own type (hence Any: a dict cannot say which).
    _handlers: dict[type[Action], Callable[[Actor, Turn, Any], Outcome]] = {
        Count: _count, ResetCount: _reset_count, Move: _move, EndAttempt: _end_attempt,
        MarkUnhealthy: _mark_unhealthy, ClearUnhealthy: _clear_unhealthy, NodeRefused: _node_refused,
        StartAttempt: slice_act.start_attempt, CreateSlice: slice_act.create_slice,
        DeleteSlice: slice_act.delete_slice, SetUp: host_act.set_up, Launch: host_act.launch,
        StopProgram: host_act.stop_program, GrowSlices: elastic_act.grow_slices, DropGrowth: elastic_act.drop_growth,
    }
