"""An attempt's slice at the cloud: looked up, and deleted with its event. The one home of both,
for the sweep (observe, act, the reconciler) and the use cases (`show`, `cancel`, `delete`,
`logs`, following a create): through the API the job's spec chose (`api_of`), by the attempt's
name, slice count and nodes (an elastic attempt's own, and those grown for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from tpujob.cloud.base import Cloud, Slice
from tpujob.names import nodes_to_delete, own_nodes
from tpujob.spec.stored import api_of

if TYPE_CHECKING:
    from tpujob.store.models import Attempt, Job
    from tpujob.store.repository import Store


def attempt_slice(cloud: Cloud, job: Job, attempt: Attempt, nodes: Sequence[str] | None = None) -> Slice:
    """The attempt's slice as the cloud has it now: its own nodes, or `nodes` (those being grown
    for it; everything a delete would delete)."""
    return cloud.for_api(api_of(job)).get_slice(job.project, attempt.zone, attempt.slice_name, slices=attempt.slices,
                                                nodes=own_nodes(attempt) if nodes is None else tuple(nodes))


def delete_attempt_slice(cloud: Cloud, store: Store, job: Job, attempt: Attempt, why: str = "") -> None:
    """Delete the attempt's slice, every node of it (grown ones too) and its queued resource, and
    say so in the job's events (`why`: how it came to be deleted). Safe to call twice."""
    cloud.for_api(api_of(job)).delete_slice(job.project, attempt.zone, attempt.slice_name, slices=attempt.slices,
                                            nodes=nodes_to_delete(attempt))
    store.add_event(job.id, "slice", f"deleted slice {attempt.slice_name}"
                    + (f" ({attempt.slices} slices)" if attempt.slices > 1 else "") + (f", {why}" if why else ""))
