"""act's hands on the cloud side of an attempt: open the next attempt (on a fallback placement,
or on the same slice), ask for its slice without waiting for the create, follow a create an
earlier sweep asked for, and delete the slice. Each handler takes (actor, turn, action), as
act.Actor's table calls it; an elastic job's variants are in elastic_act.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpujob.cloud.base import Slice, SlicePhase
from tpujob.errors import (
    AuthError,
    CloudError,
    CloudRefused,
    ConflictError,
    LocationDenied,
    NotFoundError,
    PermissionDenied,
    SlicePreempted,
    StockoutError,
    UsageError,
)
from tpujob.faults import crash_point
from tpujob.names import own_nodes
from tpujob.reconcile import elastic_act
from tpujob.reconcile import placement as placing
from tpujob.reconcile.actions import CreateSlice, DeleteSlice, StartAttempt
from tpujob.reconcile.attempt_slices import attempt_slice, delete_attempt_slice
from tpujob.reconcile.observation import Observation, SliceCondition, condition_of
from tpujob.reconcile.observe import refusal_of
from tpujob.reconcile.outcome import Outcome, done, refused, retry_after
from tpujob.spec.stored import api_of, spec_of
from tpujob.store.models import Attempt, Job
from tpujob.store.states import AttemptEnd, State

if TYPE_CHECKING:
    from tpujob.reconcile.act import Actor, Turn


def start_attempt(actor: Actor, turn: Turn, action: StartAttempt) -> Outcome:
    job, attempt = turn.job, turn.attempt
    spec = spec_of(job)
    if (action.keep_survivors or action.grow) and attempt is not None:
        elastic_act.start_attempt(actor, turn, action)
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
        elastic_act.delete_lost(actor, turn, action)
        return done()
    if turn.attempt is not None:
        delete_attempt_slice(actor.cloud, actor.store, turn.job, turn.attempt)
        crash_point("slice-deleted")
    return done()
