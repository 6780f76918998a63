"""act: carry out decide's actions for one job, in order, under its lease. One handler per
action type, each `(actor, turn, action)` returning an Outcome (outcome.py); HANDLERS, at the
bottom, maps each action type to its handler. The Actor holds what every handler shares (the
store, the cloud, the hosts). The handlers, by what they act on:

- the job's own record: its counters, its moves, the end of its attempt, its health mark;
- the slice: open the next attempt (on a fallback placement, or on the same slice), ask for its
  slice without waiting for the create, follow a create an earlier sweep asked for, delete it;
- the hosts: start setup, launch the program once setup is done on every host, stop it (its
  stacks first when it hung), unmount what an ending attempt mounted;
- an elastic multislice job (reconcile/elastic.py decides): stop the program on the slices left,
  delete only the lost ones, open the next attempt on the nodes kept (and grown), ask for the
  missing slices without waiting for them. StartAttempt, DeleteSlice and StopProgram of an
  elastic job go to its variants here.

A handler never moves the job itself: what it learned goes back to decide as an observation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tpujob.cloud.base import Cloud, Slice, SlicePhase, SliceRequest
from tpujob.cloud.multislice import surviving_hosts
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
from tpujob.names import attempt_nodes, growing_nodes, own_nodes, slice_labels, slice_name
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
    NodeRefused,
    ResetCount,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.attempt_slices import attempt_slice, delete_attempt_slice
from tpujob.reconcile.observation import Observation, Setup, SliceCondition, condition_of
from tpujob.reconcile.observe import HostOps, refusal_of
from tpujob.reconcile.outcome import Outcome, done, refused, retry_after, setup_failed, ssh_refused
from tpujob.reconcile.policy import capacity_wait, runtime_version, slice_network
from tpujob.spec.stored import api_of, spec_of
from tpujob.store.models import Attempt, Job
from tpujob.store.states import AttemptEnd, Counter, State

if TYPE_CHECKING:
    from tpujob.store.repository import Store


# A hung program made no progress for heartbeat_timeout_seconds (or run.hang_seconds): it will
# not reach the step boundary where it would save, so the stop's usual grace, sized for a
# SIGTERM checkpoint, would only keep the new slice waiting (and a frozen host's process never
# sees the SIGTERM at all). Seconds enough for a handler to flush its logs.
HUNG_STOP_GRACE_SECONDS = 5


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
    """What every handler shares: the store, the cloud, the hosts, who acts (the lease's owner),
    and what a sweep reports of its jobs beside their moves (refused credentials, denied zones,
    refused logins)."""

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
            outcome = HANDLERS[type(action)](self, turn, action)
            if outcome.kind != "done" or outcome.observed is not None:
                return outcome
        if turn.counters:
            self.store.update(turn.job.id, **turn.counters)
        return outcome

    # The unhealthy mark: written here only (a Move clears it with the transition, a new
    # attempt starts without it); decide reads its age (JobView.unhealthy_seconds) and judges.
    def mark_unhealthy(self, job: Job, kind: str, event: str) -> None:
        with self.store.atomic():  # the mark and its event together
            self.store.update(job.id, unhealthy_since=self.clock())
            self.store.add_event(job.id, kind, event)

    def clear_unhealthy(self, job: Job) -> None:
        self.store.update(job.id, unhealthy_since=None)

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


# ---- the job's own record ---------------------------------------------------------------------


def count(actor: Actor, turn: Turn, action: Count) -> Outcome:
    # Applied with the next Move, in its transaction: a crash in between counts nothing.
    turn.counters[action.counter] = getattr(turn.job, action.counter) + 1
    return done()


def reset_count(actor: Actor, turn: Turn, action: ResetCount) -> Outcome:
    turn.counters[action.counter] = 0
    return done()


def move(actor: Actor, turn: Turn, action: Move) -> Outcome:
    with actor.store.atomic():  # the move and the ended attempt's cause together
        turn.job = actor.store.transition(turn.job.id, turn.state, action.to, action.message,
                                          end_reason=action.reason, owner=actor.actor, unhealthy_since=None,
                                          **turn.counters)
        if turn.ended is not None:
            actor.store.record_cause(turn.job.id, turn.ended, action.message)
    turn.state, turn.counters, turn.ended = action.to, {}, None
    crash_point("moved")
    return done()


def end_attempt(actor: Actor, turn: Turn, action: EndAttempt) -> Outcome:
    if turn.attempt is not None:
        slice_ = turn.slice
        lost = slice_.lost_slices if slice_ is not None and turn.attempt.slices > 1 else ()
        actor.store.end_attempt(turn.job.id, turn.attempt.number, action.reason, lost_slices=lost)
        if lost and slice_ is not None:
            actor.store.add_event(turn.job.id, "slice", f"attempt {turn.attempt.number} lost slice"
                                  f"{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of "
                                  f"{turn.attempt.slices}: {slice_.node_state}")
        turn.ended = turn.attempt.number
        _unmount(actor, turn, turn.attempt)
    return done()


def mark_unhealthy(actor: Actor, turn: Turn, action: MarkUnhealthy) -> Outcome:
    actor.mark_unhealthy(turn.job, "health", f"{action.why or 'hosts unreachable or program missing'}; "
                         "re-checking")
    return done()


def clear_unhealthy(actor: Actor, turn: Turn, action: ClearUnhealthy) -> Outcome:
    actor.clear_unhealthy(turn.job)
    return done()


def node_refused(actor: Actor, turn: Turn, action: NodeRefused) -> Outcome:
    """This node could not log in on the job's hosts: the sweep's report says so every time
    (`node_problems`), the job's events once (not again while it says the same)."""
    why = f"this node ({actor.node}) cannot log in on the hosts: {action.why}; the job is left as it is"
    actor.node_problems[turn.job.id] = why
    events = actor.store.events(turn.job.id)
    if not events or events[-1].message != why:
        actor.store.add_event(turn.job.id, "node", why)
    return retry_after(why)


# ---- the slice --------------------------------------------------------------------------------


def start_attempt(actor: Actor, turn: Turn, action: StartAttempt) -> Outcome:
    job, attempt = turn.job, turn.attempt
    spec = spec_of(job)
    if (action.keep_survivors or action.grow) and attempt is not None:
        _start_on_kept_nodes(actor, turn, action)
        return done()
    if action.reuse_slice and attempt is not None:
        turn.job, turn.attempt = actor.store.start_attempt(
            job.id, turn.state, State.SETTING_UP, "new attempt on the same slice", zone=attempt.zone,
            accelerator=attempt.accelerator, queued=attempt.queued, reuse_slice=attempt.slice_name,
            slices=attempt.slices, nodes=list(own_nodes(attempt)) or None, owner=actor.actor)
        turn.state = State.SETTING_UP
        _hand_mtbi(actor, turn.job, turn.attempt)
        return done()
    options = spec.placements()
    # Past the last fallback, back to the primary: capacity comes back where it was missing.
    # Placements refused for good (the zone does not offer the accelerator, or the region's
    # quota is spent) are passed over.
    placement = job.placement
    if action.next_placement:
        placement = placing.following(job.placement, len(options),
                                      placing.blocked(options, actor.store.attempts(job.id)))
    elif attempt is not None and attempt.end_reason == AttemptEnd.PREEMPTED:
        placement = placing.after_interruption(job.placement, auto=spec.spec.tpu.placement == "auto")
    accelerator, zone = options[placement]
    if placement != job.placement:
        crash_point("placement")  # chosen, nothing written yet: the next sweep chooses again
    turn.job, turn.attempt = actor.store.start_attempt(
        job.id, turn.state, State.PROVISIONING, f"creating the slice of attempt {job.attempt + 1}", zone=zone,
        accelerator=accelerator, queued=spec.spec.tpu.queued, slices=spec.spec.tpu.max_slices, owner=actor.actor,
        placement=placement)
    turn.state, turn.slice = State.PROVISIONING, None
    _hand_mtbi(actor, turn.job, turn.attempt)
    crash_point("provisioning")
    return create_slice(actor, turn, CreateSlice())


def _hand_mtbi(actor: Actor, job: Job, attempt: Attempt | None) -> None:
    """`checkpoint_every: auto`: the mean time between interruptions the store measured for the
    attempt's placement, recorded on it (attempt.reported's mtbi_ms) for the launch to hand to
    the runtime (contract.ENV_MTBI_SECONDS) and `show` to say, with the evidence in an event."""
    spec = spec_of(job)
    runtime = spec.spec.run.runtime or {}
    if attempt is None or spec.spec.run.command or runtime.get("checkpoint_every") != "auto":
        return
    from tpujob.durations import duration_text
    from tpujob.reconcile.history import mtbi_for

    mtbi, seen = mtbi_for(actor.store, attempt.zone, attempt.accelerator, spec.provisioning, actor.clock())
    actor.store.record_steps(job.id, attempt.number, reported={"mtbi_ms": int(mtbi * 1000)})
    actor.store.add_event(job.id, "checkpoint",
                          f"checkpoint_every auto: M {duration_text(mtbi)} between interruptions in "
                          f"{attempt.zone} ({seen.runs} runs, {seen.interruptions} interruptions"
                          f"{'' if seen.runs else ', the prior'}), C measured by the runtime")


def create_slice(actor: Actor, turn: Turn, action: CreateSlice) -> Outcome:
    job, attempt = turn.job, turn.current()
    try:
        earlier = _earlier_create(actor, job, attempt)
        if earlier is not None:
            return earlier
        request = actor.slice_request(job, attempt, name=attempt.slice_name, queued=attempt.queued,
                                      slices=attempt.slices)
        created: Slice | None = None
        if attempt.queued:
            created = actor.cloud.for_api(request.api).create_queued_resource(request)
        else:
            # Not waited for: the worker moves on, and the next sweep's listing shows the
            # node CREATING, then READY (or, absent, its operation says why).
            operation = actor.cloud.for_api(request.api).request_node(request)
            actor.store.record_create_operation(job.id, attempt.number, operation)
    except ConflictError:
        # The slice exists: an earlier try of this very create got through. Adopt it.
        actor.store.add_event(job.id, "slice", f"adopted existing {attempt.slice_name}")
        return done()
    except StockoutError as exc:
        actor.store.add_event(job.id, "stockout", str(exc))
        return refused(SliceCondition.STOCKOUT, str(exc))
    except SlicePreempted as exc:  # preempted under its create: decide counts a preemption
        actor.store.add_event(job.id, "slice", f"create of {attempt.slice_name} ended on a preemption: {exc}")
        return done(Observation(slice=SliceCondition.LOST))
    except (CloudRefused, PermissionDenied, NotFoundError, UsageError) as exc:
        # For good: a bad request, a missing permission, a missing snapshot or disk, a spent
        # quota, a zone that does not offer the accelerator. The same create would fail every
        # sweep; decide moves on to another placement or ends the job instead.
        phase, scope = refusal_of(exc)
        if isinstance(exc, AuthError):
            actor.auth_errors[job.id] = exc
        if isinstance(exc, LocationDenied):
            actor.config_errors[job.id] = exc
        actor.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} refused: {exc}")
        return refused(phase, str(exc), scope)
    except AuthError as exc:  # 401: the sweep's own credentials, not the job's fault
        actor.auth_errors[job.id] = exc
        actor.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry "
                                               f"once the credentials work: {exc}")
        return retry_after(str(exc))
    except CloudError as exc:
        actor.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry: {exc}")
        return retry_after(str(exc))
    crash_point("slice-requested")
    actor.hosts.prepare(job)
    actor.store.add_event(job.id, "slice", f"requested {attempt.slice_name} "
                                           f"({'queued resource' if attempt.queued else 'node'})")
    return done(slice_=created)


def _earlier_create(actor: Actor, job: Job, attempt: Attempt) -> Outcome | None:
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
        if not actor.cloud.for_api(api_of(job)).operation_done(attempt.create_operation, what, create=True):
            return retry_after(f"the create of {attempt.slice_name} is under way")
    except NotFoundError:
        pass
    except CloudError as exc:
        if type(exc) is not CloudError:  # typed: a stockout, a refusal, a preemption under it
            raise
        # A transient end (the service's, not the request's), or the operation unreadable
        # for now: asked for again (a node that exists after all is adopted on the 409).
        actor.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry: {exc}")
    else:
        node = attempt_slice(actor.cloud, job, attempt)
        if node.phase != SlicePhase.GONE:
            return done(Observation(slice=condition_of(node.phase)), node)
        raise SlicePreempted(f"node {attempt.slice_name} was created, then went away")
    actor.store.record_create_operation(job.id, attempt.number, None)
    return None


def delete_slice(actor: Actor, turn: Turn, action: DeleteSlice) -> Outcome:
    if action.lost_only:
        _delete_lost(actor, turn, action)
        return done()
    if turn.attempt is not None:
        delete_attempt_slice(actor.cloud, actor.store, turn.job, turn.attempt)
        crash_point("slice-deleted")
    return done()


# ---- the hosts --------------------------------------------------------------------------------


def set_up(actor: Actor, turn: Turn, action: SetUp) -> Outcome:
    job, attempt = turn.job, turn.current()
    slice_ = turn.slice or attempt_slice(actor.cloud, job, attempt)
    if slice_.hosts:
        # The address tpujob (and so the user) reaches host 0 on, as `list` shows it.
        external = spec_of(job).spec.tpu.network.external_ips
        actor.store.update(job.id, host0_ip=slice_.hosts[0].address(external))
    try:
        seen = actor.hosts.start_setup(job, attempt, slice_)
        crash_point("setup-started")
    except SetupFailed as exc:
        return setup_failed(str(exc), slice_)
    except SshAuthRefused as exc:
        return ssh_refused(str(exc), slice_)
    except TpujobError as exc:  # hosts not answering (yet): the next sweep tries again
        gone = _lost_under_setup(actor, job, attempt)
        if gone is None:
            return _retry_setup(actor, turn, exc)
        # e.g. a disk attach refused because the node was preempted: decide on that now.
        states = ", ".join(filter(None, (gone.node_state, gone.queued_resource_state))) or "gone"
        actor.store.add_event(job.id, "setup", f"setup stopped, the slice is {states}: {exc}")
        return done(Observation(slice=SliceCondition.LOST), gone)
    running = sum(1 for state in seen.hosts if state == Setup.RUNNING)
    if running and seen.error is None and seen.refused is None:  # say why nothing moves for a while
        actor.store.add_event(job.id, "setup", f"setup running on {running} of {len(seen.hosts)} hosts; "
                              "the program launches once it is done on every host")
    # What the hosts said as it started (running; done where it already was): decide waits
    # for it, or launches now.
    return done(Observation(slice=SliceCondition.READY, setup=seen.hosts, setup_error=seen.error,
                            ssh_refused=seen.refused, setup_cache=seen.cache), slice_)


def launch(actor: Actor, turn: Turn, action: Launch) -> Outcome:
    job, attempt = turn.job, turn.current()
    slice_ = turn.slice or attempt_slice(actor.cloud, job, attempt)
    actor.store.add_event(job.id, "setup", f"setup done on {len(slice_.hosts)} hosts"
                          + (f"; setup cache: {action.cache}" if action.cache else ""))
    try:
        actor.hosts.launch(job, attempt, slice_)
        crash_point("launched")
    except SetupFailed as exc:
        return setup_failed(str(exc), slice_)
    except SshAuthRefused as exc:
        return ssh_refused(str(exc), slice_)
    except TpujobError as exc:
        return _retry_setup(actor, turn, exc)
    return done(Observation(slice=SliceCondition.READY, launched=len(slice_.hosts)), slice_)


def _retry_setup(actor: Actor, turn: Turn, exc: TpujobError) -> Outcome:
    """Setup goes on at the next sweep. A host that cannot be reached marks the job
    unhealthy from the first such round (decide replaces the slice once that lasts past the
    unhealthy grace: a host that died in setup never answers again, however long setup may
    take); any other trouble clears the mark. One event per mark, not one per sweep. The one
    mark not asked for by decide: only this handler sees the setup step's unreachable hosts
    (decide still judges how long the mark lasts); Actor writes it, as for MarkUnhealthy."""
    job = turn.job
    unreachable = isinstance(exc, HostsUnreachable)
    if unreachable and job.unhealthy_since is None:
        actor.mark_unhealthy(job, "setup", f"setup will be retried: {exc}; the slice is "
                             "replaced if its hosts stay unreachable")
    elif not unreachable:
        if job.unhealthy_since is not None:
            actor.clear_unhealthy(job)
        actor.store.add_event(job.id, "setup", f"setup will be retried: {exc}")
    return retry_after(str(exc))


def _lost_under_setup(actor: Actor, job: Job, attempt: Attempt) -> Slice | None:
    """The slice, read again after a setup step failed, when it is gone or dead (preempted
    meanwhile); None when it still looks usable or cannot be read."""
    try:
        again = attempt_slice(actor.cloud, job, attempt)
    except TpujobError:
        return None
    lost = (SliceCondition.LOST, SliceCondition.GONE, SliceCondition.STOPPING)
    return again if condition_of(again.phase) in lost else None


def stop_program(actor: Actor, turn: Turn, action: StopProgram) -> Outcome:
    """The hosts' stop (HostOps.stop_program), as cancel and delete run it too (service/jobs.
    _stop_program); here a failed stop is an event and the sweep goes on, there it refuses."""
    if action.survivors:
        _stop_survivors(actor, turn, action)
        return done()
    if turn.attempt is not None and turn.slice is not None and turn.slice.phase == SlicePhase.READY:
        if action.stacks:  # a hung program: where it stood, before it is gone
            try:
                actor.store.add_event(turn.job.id, "stacks",
                                      actor.hosts.capture_stacks(turn.job, turn.attempt, turn.slice))
            except TpujobError as exc:
                actor.store.add_event(turn.job.id, "stacks", f"stacks not captured: {exc}")
        try:
            if action.stacks:
                actor.hosts.stop_program(turn.job, turn.attempt, turn.slice, grace_seconds=HUNG_STOP_GRACE_SECONDS)
            else:
                actor.hosts.stop_program(turn.job, turn.attempt, turn.slice)
        except TpujobError as exc:
            actor.store.add_event(turn.job.id, "hosts", f"stop failed: {exc}")
    return done()


def _unmount(actor: Actor, turn: Turn, attempt: Attempt) -> None:
    """An attempt ending on a slice that stays READY (kept, or reused by the next attempt)
    leaves none of its disk and bucket mounts behind."""
    if turn.slice is None or turn.slice.phase != SlicePhase.READY:
        return
    try:
        actor.hosts.unmount(turn.job, attempt, turn.slice)
    except TpujobError as exc:
        actor.store.add_event(turn.job.id, "hosts", f"unmount failed: {exc}")


# ---- an elastic multislice job ----------------------------------------------------------------


def _stop_survivors(actor: Actor, turn: Turn, action: StopProgram) -> None:
    """The program on the hosts of the slices not lost: it checkpointed with the others on the
    notice and exited, or it waits on peers that are gone. Numbered as in its attempt."""
    if turn.attempt is None or turn.slice is None:
        return
    hosts = surviving_hosts(turn.slice)
    if not hosts:
        return
    kept = dataclasses.replace(turn.slice, hosts=hosts)
    try:
        actor.hosts.stop_program(turn.job, turn.attempt, kept)
    except TpujobError as exc:
        actor.store.add_event(turn.job.id, "hosts", f"stop on the slices left failed: {exc}")


def _delete_lost(actor: Actor, turn: Turn, action: DeleteSlice) -> None:
    if turn.attempt is None or turn.slice is None:
        return
    nodes = attempt_nodes(turn.attempt)
    lost = [nodes[k] for k in turn.slice.lost_slices if k < len(nodes)]
    for node in lost:
        actor.cloud.for_api(api_of(turn.job)).delete_node(turn.job.project, turn.attempt.zone, node)
    actor.store.add_event(turn.job.id, "slice",
                          f"deleted lost slice{'s' if len(lost) > 1 else ''} {', '.join(lost)}")


def _start_on_kept_nodes(actor: Actor, turn: Turn, action: StartAttempt) -> None:
    """The next attempt on the ended one's nodes: those of the slices it did not lose
    (keep_survivors), or all of them and those grown for it (grow)."""
    job, attempt = turn.job, turn.current()
    nodes = attempt_nodes(attempt)
    if action.keep_survivors:
        lost = set(turn.slice.lost_slices if turn.slice is not None else ())
        nodes = [n for k, n in enumerate(nodes) if k not in lost]
        message = f"new attempt on the {len(nodes)} slice(s) left"
    else:
        nodes = nodes + growing_nodes(attempt)
        message = f"new attempt on {len(nodes)} slices, grown back"
    with actor.store.atomic():
        turn.job, turn.attempt = actor.store.start_attempt(
            job.id, turn.state, State.SETTING_UP, message, zone=attempt.zone, accelerator=attempt.accelerator,
            queued=attempt.queued, reuse_slice=attempt.slice_name, slices=len(nodes), nodes=nodes, owner=actor.actor)
        if attempt.growing:  # the grown nodes are the new attempt's now
            actor.store.record_growing(job.id, attempt.number, None)
    turn.state, turn.slice = State.SETTING_UP, None


def grow_slices(actor: Actor, turn: Turn, action: GrowSlices) -> Outcome:
    """Ask for the slices the attempt lacks, NAME-k after the attempt's own number (never a
    name an earlier attempt used), without waiting: observe follows them."""
    job, attempt = turn.job, turn.current()
    spec = spec_of(job)
    missing = spec.spec.tpu.max_slices - attempt.slices
    prefix = slice_name(job.id, attempt.number, actor.store.store_tag)
    names = [f"{prefix}-{k}" for k in range(attempt.slices, attempt.slices + missing)]
    request = actor.slice_request(job, attempt, name=prefix, slices=len(names), node_ids=tuple(names))
    try:
        operation = actor.cloud.for_api(request.api).request_node(request)
    except ConflictError:
        operation = ""  # an earlier try made them: followed by name from now on
    operations = operation.split() if operation else []
    growing = {"nodes": {n: (operations[i] if i < len(operations) else "") for i, n in enumerate(names)}}
    actor.store.record_growing(job.id, attempt.number, json.dumps(growing))
    actor.store.add_event(job.id, "slice", f"growing back to {spec.spec.tpu.max_slices} slices: asking for "
                          f"{', '.join(names)}")
    return done()


def drop_growth(actor: Actor, turn: Turn, action: DropGrowth) -> Outcome:
    job, attempt = turn.job, turn.current()
    for node in growing_nodes(attempt):
        actor.cloud.for_api(api_of(job)).delete_node(job.project, attempt.zone, node)
    actor.store.record_growing(job.id, attempt.number, json.dumps({"failed_at": actor.clock()}))
    actor.store.add_event(job.id, "slice", f"could not grow back: {action.why}; trying again after the backoff")
    return done()


# Each action type's handler: the one map from decide's actions to what carries them out. Each
# takes the action of its own type (hence Any: a dict cannot say which).
HANDLERS: dict[type[Action], Callable[[Actor, Turn, Any], Outcome]] = {
    Count: count, ResetCount: reset_count, Move: move, EndAttempt: end_attempt,
    MarkUnhealthy: mark_unhealthy, ClearUnhealthy: clear_unhealthy, NodeRefused: node_refused,
    StartAttempt: start_attempt, CreateSlice: create_slice, DeleteSlice: delete_slice,
    SetUp: set_up, Launch: launch, StopProgram: stop_program,
    GrowSlices: grow_slices, DropGrowth: drop_growth,
}
