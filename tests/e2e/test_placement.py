"""`requeue` end to end against the emulator when Google refuses a placement for good (a zone
that does not offer the accelerator) and when a spot queued resource is preempted (SUSPENDING,
then SUSPENDED with its node deleted). Real client, real SSH, real host filesystems."""

from __future__ import annotations

import time

import pytest
from reconcile_helpers import (
    FALLBACK_ZONE,
    V5E,
    ZONE,
    api_list,
    assert_no_orphans,
    host_root,
    node_ref,
    record,
    resources,
    running,
    sweep_until,
    wait_for_file,
)

pytestmark = pytest.mark.slow

ONCE_PER_ATTEMPT = 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 600'


def test_a_zone_that_does_not_offer_the_accelerator_falls_back(cli, ctx, local_cloud, project, tmp_path):
    # v5e is not offered in us-central2-b: Google refuses the create; the fallback zone offers it.
    job = record(ctx, tmp_path, accelerator=V5E, zone=ZONE, fallback=[FALLBACK_ZONE], command=ONCE_PER_ATTEMPT)
    result = cli("requeue")
    assert result.code == 0 and result.err == ""
    job = sweep_until(ctx, job.id, running)
    assert [(a.zone, a.end_reason) for a in ctx.store.attempts(job.id)] == [
        (ZONE, "unavailable"), (FALLBACK_ZONE, None)]
    assert (job.zone, job.placement, job.capacity_misses) == (FALLBACK_ZONE, 1, 0)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, FALLBACK_ZONE, slice_name, 0) / "mnt/ran") == "2\n"
    shown = cli("show", str(job.id)).out
    assert f'could not be found in the zonal accelerator configurations for "{ZONE}"' in shown
    assert f"moving to {V5E} in {FALLBACK_ZONE}" in shown
    assert_no_orphans(ctx, local_cloud, project, (ZONE, FALLBACK_ZONE))


def test_without_a_fallback_the_job_fails_user_error_in_google_s_words(cli, ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, accelerator=V5E, zone=ZONE)
    result = cli("requeue")
    assert result.code == 0 and result.err == ""
    after = ctx.store.get(job.id)
    assert (after.state, after.end_reason, after.attempt) == ("FAILED", "user_error", 1)
    ended = [e.message for e in ctx.store.events(job.id) if e.to_state == "FAILED"]
    assert len(ended) == 1 and ended[0].startswith("this placement is refused: creating ")
    assert (f'The requested accelerator configuration for accelerator type, "{V5E}", could not be found in the '
            f'zonal accelerator configurations for "{ZONE}".; the accelerator {V5E} was not found in zone '
            f"{ZONE} [EID: 0x") in ended[0]
    assert cli("requeue").code == 0 and ctx.store.get(job.id).attempt == 1  # not retried
    assert resources(local_cloud, project) == []


def test_a_preempted_queued_resource_is_suspended_without_its_node_and_the_job_comes_back(
        cli, ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, queued=True, command=ONCE_PER_ATTEMPT)
    sweep_until(ctx, job.id, running)
    first = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, first, 0) / "mnt/ran") == "1\n"

    # SUSPENDING while the service deletes the node (set with the node's DELETING, which the
    # preemption answers), then SUSPENDED with no node left. Under load the deletion can be
    # over before the first list below: SUSPENDING may be gone by then, never ACTIVE again.
    assert local_cloud.preempt(node_ref(project, ZONE, first))["state"] == "DELETING"
    seen, deadline = [], time.monotonic() + 20
    while not seen or seen[-1] != ("SUSPENDED", False):
        qr = next(q for q in api_list(local_cloud, project, ZONE, "queuedResources") if q["name"].endswith(first))
        node = any(n["name"].endswith(first) for n in api_list(local_cloud, project, ZONE, "nodes"))
        if not seen or seen[-1] != (qr["state"]["state"], node):
            seen.append((qr["state"]["state"], node))
        assert time.monotonic() < deadline, seen
        time.sleep(0.01)
    assert all(state in ("SUSPENDING", "SUSPENDED") for state, _ in seen), seen
    assert qr["state"].get("stateInitiator") == "SERVICE"

    result = cli("requeue")
    assert result.code == 0, result.err
    after = ctx.store.get(job.id)
    assert (after.preemptions, after.attempt, after.state) == (1, 2, "PROVISIONING")
    job = sweep_until(ctx, job.id, running)
    second = ctx.store.current_attempt(job.id).slice_name
    assert wait_for_file(host_root(local_cloud, project, ZONE, second, 0) / "mnt/ran") == "2\n"
    assert [(a.number, a.end_reason) for a in ctx.store.attempts(job.id)] == [(1, "preempted"), (2, None)]
    # The suspended queued resource holds quota until deleted: it is.
    deadline = time.monotonic() + 10
    while first in {r[2] for r in resources(local_cloud, project)} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {r[2] for r in resources(local_cloud, project)} == {second}
    assert_no_orphans(ctx, local_cloud, project)
