"""act's hands for an elastic multislice job (reconcile/elastic.py decides): stop the program on
the slices left, delete only the lost ones, open the next attempt on the nodes kept (and grown),
and ask for the missing slices without waiting for them. Each takes act's (actor, turn, action):
act.Actor's table calls the growth's, slice_act and host_act the others, where the action
they were given is an elastic job's."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from tpujob.cloud.multislice import surviving_hosts
from tpujob.errors import ConflictError, TpujobError
from tpujob.names import attempt_nodes, growing_nodes, slice_name
from tpujob.reconcile.outcome import Outcome, done
from tpujob.spec.stored import api_of, spec_of
from tpujob.store.states import State

if TYPE_CHECKING:
    from tpujob.reconcile.act import Actor, Turn
    from tpujob.reconcile.actions import DeleteSlice, DropGrowth, GrowSlices, StartAttempt, StopProgram


def stop_survivors(actor: Actor, turn: Turn, action: StopProgram) -> None:
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


def delete_lost(actor: Actor, turn: Turn, action: DeleteSlice) -> None:
    if turn.attempt is None or turn.slice is None:
        return
    nodes = attempt_nodes(turn.attempt)
    lost = [nodes[k] for k in turn.slice.lost_slices if k < len(nodes)]
    for node in lost:
        actor.cloud.for_api(api_of(turn.job)).delete_node(turn.job.project, turn.attempt.zone, node)
    actor.store.add_event(turn.job.id, "slice",
                          f"deleted lost slice{'s' if len(lost) > 1 else ''} {', '.join(lost)}")


def start_attempt(actor: Actor, turn: Turn, action: StartAttempt) -> None:
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
