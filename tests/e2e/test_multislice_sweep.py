"""A multislice job through the sweep, without the runtime (a command that sleeps): as nodes
made apart and through one queued resource, it runs on every slice's hosts, and losing a slice
ends the attempt whole, says which slice was lost, and the next attempt makes every slice anew.
(The runtime's side, a bit-exact resume over two slices, is test_multislice.py.)"""

from __future__ import annotations

import pytest
from reconcile_helpers import ZONE, assert_no_orphans, node_ref, record, resources, sweep_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.mark.parametrize("queued", [False, True], ids=["nodes", "queued-resource"])
def test_losing_one_slice_ends_the_attempt_and_the_next_makes_every_slice(ctx, tmp_path, local_cloud, project,
                                                                          queued):
    job = record(ctx, tmp_path, "ms", slices=2, queued=queued)
    job = sweep_until(ctx, job.id, lambda j: j.state == "RUNNING", timeout=90)
    first = ctx.store.current_attempt(job.id)
    assert (first.slices, first.queued) == (2, queued)
    made = {(kind, name) for kind, _, name in resources(local_cloud, project)}
    assert {("nodes", f"{first.slice_name}-0"), ("nodes", f"{first.slice_name}-1")} <= made
    assert (("queuedResources", first.slice_name) in made) == queued
    assert_no_orphans(ctx, local_cloud, project)

    local_cloud.preempt(node_ref(project, ZONE, f"{first.slice_name}-1"), grace_seconds=0)
    job = sweep_until(ctx, job.id, lambda j: j.state == "RUNNING" and j.attempt == 2, timeout=120)

    ended = ctx.store.attempts(job.id)[0]
    assert ended.end_reason == "preempted"
    # Nodes made apart lose slice 1 alone; a multislice queued resource is suspended whole
    # (the emulator's reading of SUSPENDED: every node of it deleted).
    assert ended.lost_slices == ("0,1" if queued else "1")
    messages = [e.message for e in ctx.store.events(job.id)]
    assert any(m.startswith(f"attempt 1 lost slice{'s 0, 1' if queued else ' 1'} of 2") for m in messages), messages
    second = ctx.store.current_attempt(job.id)
    assert second.slices == 2 and second.slice_name != first.slice_name
    names = {name for _, _, name in resources(local_cloud, project)}
    assert not {first.slice_name, f"{first.slice_name}-0", f"{first.slice_name}-1"} & names, names
    assert_no_orphans(ctx, local_cloud, project)
