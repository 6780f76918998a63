"""act: carry out decide's actions for one job, in order, under its lease. One handler per
action type; each returns an Outcome (kopf's handler outcome and controller-runtime's
Result{RequeueAfter} / TerminalError are the models):

- done: carried out (it may bring what it saw: a slice just created, the program launched);
- refused(reason): the cloud turned the slice's create down; decide chooses what follows;
- setup_failed(cause): the setup script failed on a host; decide spends a failure;
- ssh_refused(cause): a host answered SSH but refused tpujob's key; decide ends the job;
- retry_after: nothing more now (a transient cloud or SSH error); a later sweep tries.

A handler never moves the job itself: what it learned goes back to decide as an observation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tpujob.cloud.base import Cloud, Slice, SlicePhase, SliceRequest
from tpujob.errors import (
    AuthError,
    CloudError,
    CloudRefused,
    ConflictError,
    HostsUnreachable,
    LocationDenied,
    NotFoundError,
    PermissionDenied,
    SetupFailed,
    SlicePreempted,
    SshAuthRefused,
    StockoutError,
    TpujobError,
    UsageError,
)
from tpujob.faults import crash_point
from tpujob.job_spec import api_of, spec_of
from tpujob.names import nodes_to_delete, own_nodes, slice_labels
from tpujob.reconcile import elastic_act
from tpujob.reconcile import placement as placing
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
    ResetCount,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.observation import Observation, Setup, SliceCondition
from tpujob.reconcile.observe import PHASES, HostOps, refusal_of
from tpujob.reconcile.policy import placements, runtime_version, slice_network
from tpujob.store.models import Attempt, Job
from tpujob.store.states import State

if TYPE_CHECKING:
    from tpujob.store.repository import Store


@dataclass(frozen=True)
class Outcome:
    kind: str  # "done" | "refused" | "setup_failed" | "ssh_refused" | "retry_after"
    reason: str = ""
    observed: Observation | None = None  # what decide is to decide on next, instead of a listing
    slice: Slice | None = None  # the slice as act last saw it (created, or read again)


def done(observed: Observation | None = None, slice_: Slice | None = None) -> Outcome:
    return Outcome("done", observed=observed, slice=slice_)


def refused(phase: SliceCondition, reason: str, scope: str | None = None) -> Outcome:
    return Outcome("refused", reason, observed=Observation(slice=phase, refusal=reason, scope=scope))


def setup_failed(cause: str, slice_: Slice) -> Outcome:
    return Outcome("setup_failed", cause, observed=Observation(slice=SliceCondition.READY, setup_error=cause),
                   slice=slice_)


def ssh_refused(cause: str, slice_: Slice) -> Outcome:
    """The hosts refused tpujob's SSH key: decide ends the job (never "unreachable")."""
    return Outcome("ssh_refused", cause, observed=Observation(slice=SliceCondition.READY, ssh_refused=cause),
                   slice=slice_)


def retry_after(reason: str) -> Outcome:
    return Outcome("retry_after", reason)


@dataclass
class _Turn:
    """One act call's view of the job as its actions change it."""
    job: Job
    attempt: Attempt | None
    slice: Slice | None
    state: State
    counters: dict[str, int] = field(default_factory=dict)
    ended: int | None = None  # the attempt an EndAttempt just ended: the next Move says why

    def current(self) -> Attempt:
        """The attempt an action works on: decide asks for such an action only where the job
        has one (RuntimeError, as a bug, where it has none)."""
        if self.attempt is None:
            raise RuntimeError(f"job {self.job.id}: no current attempt to act on")
        return self.attempt


class Actor:
    def __init__(self, store: Store, cloud: Cloud, hosts: HostOps, actor: str, *, ssh_keys: tuple[str, ...],
                 clock: Callable[[], float], metadata: dict[str, str] | None = None):
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

    def act(self, job: Job, attempt: Attempt | None, slice_: Slice | None, actions: list[Action]) -> Outcome:
        """The actions in order; the first outcome other than a plain done ends them."""
        turn = _Turn(job, attempt, slice_, State(job.state))
        outcome = done()
        for action in actions:
            outcome = self._handlers[type(action)](self, turn, action)
            if outcome.kind != "done" or outcome.observed is not None:
                return outcome
        if turn.counters:
            self.store.update(turn.job.id, **turn.counters)
        return outcome

    # -- one handler per action type -----------------------------------------------------------
    def _count(self, turn: _Turn, action: Count) -> Outcome:
        # Applied with the next Move, in its transaction: a crash in between counts nothing.
        turn.counters[action.counter] = getattr(turn.job, action.counter) + 1
        return done()

    def _reset_count(self, turn: _Turn, action: ResetCount) -> Outcome:
        turn.counters[action.counter] = 0
        return done()

    def _move(self, turn: _Turn, action: Move) -> Outcome:
        with self.store.atomic():  # the move and the ended attempt's cause together
            turn.job = self.store.transition(turn.job.id, turn.state, action.to, action.message,
                                             end_reason=action.reason, owner=self.actor, unhealthy_since=None,
                                             **turn.counters)
            if turn.ended is not None:
                self.store.record_cause(turn.job.id, turn.ended, action.message)
        turn.state, turn.counters, turn.ended = action.to, {}, None
        crash_point("moved")
        return done()

    def _end_attempt(self, turn: _Turn, action: EndAttempt) -> Outcome:
        if turn.attempt is not None:
            slice_ = turn.slice
            lost = slice_.lost_slices if slice_ is not None and turn.attempt.slices > 1 else ()
            self.store.end_attempt(turn.job.id, turn.attempt.number, action.reason, lost_slices=lost)
            if lost and slice_ is not None:
                self.store.add_event(turn.job.id, "slice", f"attempt {turn.attempt.number} lost slice"
                                     f"{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of "
                                     f"{turn.attempt.slices}: {slice_.node_state}")
            turn.ended = turn.attempt.number
            self._unmount(turn, turn.attempt)
        return done()

    def _unmount(self, turn: _Turn, attempt: Attempt) -> None:
        """An attempt ending on a slice that stays READY (kept, or reused by the next attempt)
        leaves none of its disk and bucket mounts behind."""
        if turn.slice is None or turn.slice.phase != SlicePhase.READY:
            return
        try:
            self.hosts.unmount(turn.job, attempt, turn.slice)
        except TpujobError as exc:
            self.store.add_event(turn.job.id, "hosts", f"unmount failed: {exc}")

    def _delete_slice(self, turn: _Turn, action: DeleteSlice) -> Outcome:
        if action.lost_only:
            elastic_act.delete_lost(self, turn, action)
            return done()
        if turn.attempt is not None:
            self.cloud.for_api(api_of(turn.job)).delete_slice(
                turn.job.project, turn.attempt.zone, turn.attempt.slice_name, slices=turn.attempt.slices,
                nodes=nodes_to_delete(turn.attempt))
            crash_point("slice-deleted")
            self.store.add_event(turn.job.id, "slice", f"deleted slice {turn.attempt.slice_name}")
        return done()

    def _stop_program(self, turn: _Turn, action: StopProgram) -> Outcome:
        if action.survivors:
            elastic_act.stop_survivors(self, turn, action)
            return done()
        if turn.attempt is not None and turn.slice is not None and turn.slice.phase == SlicePhase.READY:
            if action.stacks:  # a hung program: where it stood, before it is gone
                try:
                    self.store.add_event(turn.job.id, "stacks",
                                         self.hosts.capture_stacks(turn.job, turn.attempt, turn.slice))
                except TpujobError as exc:
                    self.store.add_event(turn.job.id, "stacks", f"stacks not captured: {exc}")
            try:
                self.hosts.stop_program(turn.job, turn.attempt, turn.slice)
            except TpujobError as exc:
                self.store.add_event(turn.job.id, "hosts", f"stop failed: {exc}")
        return done()

    def _mark_unhealthy(self, turn: _Turn, action: MarkUnhealthy) -> Outcome:
        with self.store.atomic():  # the mark and its event together
            self.store.update(turn.job.id, unhealthy_since=self.clock())
            self.store.add_event(turn.job.id, "health", f"{action.why or 'hosts unreachable or program missing'}; "
                                 "re-checking")
        return done()

    def _clear_unhealthy(self, turn: _Turn, action: ClearUnhealthy) -> Outcome:
        self.store.update(turn.job.id, unhealthy_since=None)
        return done()

    def _start_attempt(self, turn: _Turn, action: StartAttempt) -> Outcome:
        job, attempt = turn.job, turn.attempt
        spec = spec_of(job)
        if (action.keep_survivors or action.grow) and attempt is not None:
            elastic_act.start_attempt(self, turn, action)
            return done()
        if action.reuse_slice and attempt is not None:
            turn.job, turn.attempt = self.store.start_attempt(
                job.id, turn.state, State.SETTING_UP, "new attempt on the same slice", zone=attempt.zone,
                accelerator=attempt.accelerator, queued=attempt.queued, reuse_slice=attempt.slice_name,
                slices=attempt.slices, nodes=list(own_nodes(attempt)) or None, owner=self.actor)
            turn.state = State.SETTING_UP
            return done()
        options = placements(spec)
        # Past the last fallback, back to the primary: capacity comes back where it was missing.
        # Placements refused for good (the zone does not offer the accelerator, or the region's
        # quota is spent) are passed over.
        placement = job.placement
        if action.next_placement:
            placement = placing.following(job.placement, len(options),
                                          placing.blocked(options, self.store.attempts(job.id)))
        accelerator, zone = options[placement]
        if placement != job.placement:
            crash_point("placement")  # chosen, nothing written yet: the next sweep chooses again
        turn.job, turn.attempt = self.store.start_attempt(
            job.id, turn.state, State.PROVISIONING, f"creating the slice of attempt {job.attempt + 1}", zone=zone,
            accelerator=accelerator, queued=spec.spec.tpu.queued, slices=spec.spec.tpu.max_slices, owner=self.actor,
            placement=placement)
        turn.state, turn.slice = State.PROVISIONING, None
        crash_point("provisioning")
        return self._create_slice(turn, CreateSlice())

    def _create_slice(self, turn: _Turn, action: CreateSlice) -> Outcome:
        job, attempt = turn.job, turn.current()
        try:
            earlier = self._earlier_create(job, attempt)
            if earlier is not None:
                return earlier
            request = self.slice_request(job, attempt, name=attempt.slice_name, queued=attempt.queued,
                                         slices=attempt.slices)
            created: Slice | None = None
            if attempt.queued:
                created = self.cloud.for_api(request.api).create_queued_resource(request)
            else:
                # Not waited for: the worker moves on, and the next sweep's listing shows the
                # node CREATING, then READY (or, absent, its operation says why).
                operation = self.cloud.for_api(request.api).request_node(request)
                self.store.record_create_operation(job.id, attempt.number, operation)
        except ConflictError:
            # The slice exists: an earlier try of this very create got through. Adopt it.
            self.store.add_event(job.id, "slice", f"adopted existing {attempt.slice_name}")
            return done()
        except StockoutError as exc:
            self.store.add_event(job.id, "stockout", str(exc))
            return refused(SliceCondition.STOCKOUT, str(exc))
        except SlicePreempted as exc:  # preempted under its create: decide counts a preemption
            self.store.add_event(job.id, "slice", f"create of {attempt.slice_name} ended on a preemption: {exc}")
            return done(Observation(slice=SliceCondition.LOST))
        except (CloudRefused, PermissionDenied, NotFoundError, UsageError) as exc:
            # For good: a bad request, a missing permission, a missing snapshot or disk, a spent
            # quota, a zone that does not offer the accelerator. The same create would fail every
            # sweep; decide moves on to another placement or ends the job instead.
            phase, scope = refusal_of(exc)
            if isinstance(exc, AuthError):
                self.auth_errors[job.id] = exc
            if isinstance(exc, LocationDenied):
                self.config_errors[job.id] = exc
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} refused: {exc}")
            return refused(phase, str(exc), scope)
        except AuthError as exc:  # 401: the sweep's own credentials, not the job's fault
            self.auth_errors[job.id] = exc
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry "
                                                  f"once the credentials work: {exc}")
            return retry_after(str(exc))
        except CloudError as exc:
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry: {exc}")
            return retry_after(str(exc))
        crash_point("slice-requested")
        self.hosts.prepare(job)
        self.store.add_event(job.id, "slice", f"requested {attempt.slice_name} "
                                              f"({'queued resource' if attempt.queued else 'node'})")
        return done(slice_=created)

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
            **slice_network(spec), **fields)

    def _earlier_create(self, job: Job, attempt: Attempt) -> Outcome | None:
        """What became of this attempt's node create, asked for by an earlier sweep, when its
        node was not in the listing: still under way (wait), or the node there after all (the
        listing predates the create: decide on the node). Its error, once it ended with one, is
        raised (typed, as a create's own); a create that ended well, its node gone since,
        raises SlicePreempted. None: ask for the node (again): there was no create, the API
        has forgotten it, or it ended in a transient error; the slice's name is the attempt's,
        so it is never created twice."""
        if attempt.queued or not attempt.create_operation:
            return None
        what = f"creating node {attempt.slice_name}"
        try:
            if not self.cloud.for_api(api_of(job)).operation_done(attempt.create_operation, what, create=True):
                return retry_after(f"the create of {attempt.slice_name} is under way")
        except NotFoundError:
            pass
        except CloudError as exc:
            if type(exc) is not CloudError:  # typed: a stockout, a refusal, a preemption under it
                raise
            # A transient end (the service's, not the request's), or the operation unreadable
            # for now: asked for again (a node that exists after all is adopted on the 409).
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry: {exc}")
        else:
            node = self._slice_of(job, attempt)
            if node.phase != SlicePhase.GONE:
                return done(Observation(slice=PHASES[node.phase]), node)
            raise SlicePreempted(f"node {attempt.slice_name} was created, then went away")
        self.store.record_create_operation(job.id, attempt.number, None)
        return None

    def _slice_of(self, job: Job, attempt: Attempt) -> Slice:
        return self.cloud.for_api(api_of(job)).get_slice(job.project, attempt.zone, attempt.slice_name,
                                                         slices=attempt.slices, nodes=own_nodes(attempt))

    def _set_up(self, turn: _Turn, action: SetUp) -> Outcome:
        job, attempt = turn.job, turn.current()
        slice_ = turn.slice or self._slice_of(job, attempt)
        if slice_.hosts:
            # The address tpujob (and so the user) reaches host 0 on, as `list` shows it.
            external = spec_of(job).spec.tpu.network.external_ips
            self.store.update(job.id, host0_ip=slice_.hosts[0].address(external))
        try:
            seen = self.hosts.start_setup(job, attempt, slice_)
            crash_point("setup-started")
        except SetupFailed as exc:
            return setup_failed(str(exc), slice_)
        except SshAuthRefused as exc:
            return ssh_refused(str(exc), slice_)
        except TpujobError as exc:  # hosts not answering (yet): the next sweep tries again
            gone = self._lost_under_setup(job, attempt)
            if gone is None:
                return self._retry_setup(turn, exc)
            # e.g. a disk attach refused because the node was preempted: decide on that now.
            states = ", ".join(filter(None, (gone.node_state, gone.queued_resource_state))) or "gone"
            self.store.add_event(job.id, "setup", f"setup stopped, the slice is {states}: {exc}")
            return done(Observation(slice=SliceCondition.LOST), gone)
        running = sum(1 for state in seen.hosts if state == Setup.RUNNING)
        if running and seen.error is None and seen.refused is None:  # say why nothing moves for a while
            self.store.add_event(job.id, "setup", f"setup running on {running} of {len(seen.hosts)} hosts; "
                                 "the program launches once it is done on every host")
        # What the hosts said as it started (running; done where it already was): decide waits
        # for it, or launches now.
        return done(Observation(slice=SliceCondition.READY, setup=seen.hosts, setup_error=seen.error,
                                ssh_refused=seen.refused, setup_cache=seen.cache), slice_)

    def _launch(self, turn: _Turn, action: Launch) -> Outcome:
        job, attempt = turn.job, turn.current()
        slice_ = turn.slice or self._slice_of(job, attempt)
        self.store.add_event(job.id, "setup", f"setup done on {len(slice_.hosts)} hosts"
                             + (f"; setup cache: {action.cache}" if action.cache else ""))
        try:
            self.hosts.launch(job, attempt, slice_)
            crash_point("launched")
        except SetupFailed as exc:
            return setup_failed(str(exc), slice_)
        except SshAuthRefused as exc:
            return ssh_refused(str(exc), slice_)
        except TpujobError as exc:
            return self._retry_setup(turn, exc)
        return done(Observation(slice=SliceCondition.READY, launched=len(slice_.hosts)), slice_)

    def _retry_setup(self, turn: _Turn, exc: TpujobError) -> Outcome:
        """Setup goes on at the next sweep. A host that cannot be reached marks the job
        unhealthy from the first such round (decide replaces the slice once that lasts past the
        unhealthy grace: a host that died in setup never answers again, however long setup may
        take); any other trouble clears the mark. One event per mark, not one per sweep."""
        job = turn.job
        unreachable = isinstance(exc, HostsUnreachable)
        if unreachable and job.unhealthy_since is None:
            with self.store.atomic():  # the mark and its event together
                self.store.update(job.id, unhealthy_since=self.clock())
                self.store.add_event(job.id, "setup", f"setup will be retried: {exc}; the slice is "
                                     "replaced if its hosts stay unreachable")
        elif not unreachable:
            if job.unhealthy_since is not None:
                self.store.update(job.id, unhealthy_since=None)
            self.store.add_event(job.id, "setup", f"setup will be retried: {exc}")
        return retry_after(str(exc))

    def _lost_under_setup(self, job: Job, attempt: Attempt) -> Slice | None:
        """The slice, read again after a setup step failed, when it is gone or dead (preempted
        meanwhile); None when it still looks usable or cannot be read."""
        try:
            again = self._slice_of(job, attempt)
        except TpujobError:
            return None
        return again if PHASES[again.phase] in (SliceCondition.LOST, SliceCondition.ABSENT) else None

    # Each handler takes the action of its own type (hence Any: a dict cannot say which).
    _handlers: dict[type[Action], Callable[[Actor, _Turn, Any], Outcome]] = {
        Count: _count, ResetCount: _reset_count, Move: _move, EndAttempt: _end_attempt,
        DeleteSlice: _delete_slice, StopProgram: _stop_program, MarkUnhealthy: _mark_unhealthy,
        ClearUnhealthy: _clear_unhealthy, StartAttempt: _start_attempt, CreateSlice: _create_slice, SetUp: _set_up,
        Launch: _launch, GrowSlices: elastic_act.grow_slices, DropGrowth: elastic_act.drop_growth,
    }
