"""Several slices as one: the nodes of a multislice attempt, named and read as a whole.

A multislice attempt's nodes are `NAME-0` .. `NAME-(N-1)`, as Google names the nodes of a
multislice queued resource (`multisliceParams.nodeIdPrefix`, then `-0`, `-1`, ...: Cloud TPU
v2 discovery document, MultisliceParams). The orchestrator sees
them as one Slice: the hosts of every node in order (slice k's worker w is host k*H + w, the
process id JAX gives it: jax/_src/clusters/cloud_tpu_cluster.py), and one phase. One node lost
is the whole attempt lost: Google's own multislice restarts every slice when one is
recreated (cloud.google.com/tpu/docs/multislice-introduction).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from tpujob.cloud.base import QUEUED_RESOURCE_PHASES, Host, Slice, SlicePhase
from tpujob.names import node_names

# The worst phase wins: a node preempted, failed or going makes the whole slice so; a node
# missing while others exist reads as GONE (its create's operation tells why, as for one node).
_WORST_FIRST = (SlicePhase.PREEMPTED, SlicePhase.FAILED, SlicePhase.DELETING, SlicePhase.GONE,
                SlicePhase.STOPPING, SlicePhase.QUEUED, SlicePhase.PROVISIONING, SlicePhase.READY)

_LOST = frozenset({SlicePhase.PREEMPTED, SlicePhase.FAILED, SlicePhase.DELETING, SlicePhase.GONE})


def combine(name: str, zone: str, parts: list[Slice]) -> Slice:
    """One Slice for the nodes `parts` (in slice order; a GONE one for a node not found)."""
    if len(parts) == 1:
        return parts[0]
    phases = {p.phase for p in parts}
    phase = next(ph for ph in _WORST_FIRST if ph in phases)
    if phases == {SlicePhase.GONE}:
        return Slice(name=name, zone=zone, phase=SlicePhase.GONE)
    hosts: list[Host] = []
    for part in parts:
        base = len(hosts)
        hosts.extend([dataclasses.replace(h, index=base + i) for i, h in enumerate(part.hosts)])
    present = [p for p in parts if p.node_state is not None] or parts  # the nodes that exist
    created = [p.node_create_time for p in present if p.node_create_time is not None]
    windows = [p.maintenance for p in present if p.maintenance is not None]
    unhealthy = next((p for p in present if p.health not in (None, "HEALTHY")), None)

    def each(attr: str) -> str:  # "slice 0 READY, slice 1 PREEMPTED"
        return ", ".join(f"slice {k} {getattr(p, attr) or '-'}" for k, p in enumerate(parts)
                         if getattr(p, attr) or attr == "node_state")

    return Slice(
        name=name, zone=zone, phase=phase, node_state=each("node_state"),
        queued_resource_state=None, accelerator_type=present[0].accelerator_type, hosts=tuple(hosts),
        labels=present[0].labels, detail=each("detail"),
        node_create_time=max(created) if len(created) == len(parts) else None,
        failure=next((p.failure for p in parts if p.failure is not None), None),
        metadata=present[0].metadata,
        health=unhealthy.health if unhealthy else present[0].health,
        symptoms=tuple(f"slice {k}: {s}" for k, p in enumerate(parts) for s in p.symptoms),
        maintenance=min(windows, key=lambda w: w.start or float("inf")) if windows else None,
        lost_slices=tuple(k for k, p in enumerate(parts) if p.phase in _LOST),
        part_hosts=tuple(len(p.hosts) for p in parts))


def surviving_hosts(whole: Slice) -> tuple[Host, ...]:
    """The hosts of the slices not lost, numbered as in `whole` (their program's attempt)."""
    hosts: list[Host] = []
    start = 0
    for k, count in enumerate(whole.part_hosts):
        if k not in whole.lost_slices:
            hosts.extend(whole.hosts[start:start + count])
        start += count
    return tuple(hosts)


def pick(find: Callable[[str], Slice | None], name: str, zone: str, slices: int,
         nodes: list[str] | None = None) -> Slice | None:
    """The attempt's slice from what `find` (a name -> its Slice as listed, or None) knows: None
    when none of its nodes, nor a queued resource asking for them, is there.

    A multislice queued resource is listed under the attempt's name, its nodes under `NAME-k`.
    While it is queued or provisioning, a node not made yet is expected, not lost; once it is
    suspended, failed or deleting, that is the whole slice's phase (every node goes with it).
    `nodes`: an elastic attempt's own nodes (no queued resource), instead of NAME-0..N-1."""
    names = list(nodes) if nodes else node_names(name, slices)
    found = [find(n) for n in names]
    queue = find(name) if len(names) > 1 and not nodes else None
    if queue is not None and queue.queued_resource_state is None:
        queue = None  # a node of the attempt's own name: not one of this attempt's
    if all(p is None for p in found):
        if queue is not None and queue.phase == SlicePhase.PREEMPTED:  # suspended: every node went
            return dataclasses.replace(queue, lost_slices=tuple(range(len(names))))
        return queue
    waiting = queue is not None and queue.phase in (SlicePhase.QUEUED, SlicePhase.PROVISIONING)
    missing = SlicePhase.PROVISIONING if waiting else SlicePhase.GONE
    whole = combine(name, zone, [p or Slice(name=n, zone=zone, phase=missing) for n, p in zip(names, found)])
    if queue is None:
        return whole
    # ACTIVE defers to the nodes (QUEUED_RESOURCE_PHASES maps it to None).
    own = QUEUED_RESOURCE_PHASES.get(queue.queued_resource_state or "", SlicePhase.FAILED)
    phase = whole.phase if own is None else next(ph for ph in _WORST_FIRST if ph in (own, whole.phase))
    return dataclasses.replace(whole, phase=phase, queued_resource_state=queue.queued_resource_state,
                               failure=queue.failure or whole.failure,
                               detail="; ".join(filter(None, [queue.detail, whole.detail])))
