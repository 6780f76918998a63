"""Google's answers that are neither a stockout nor a plain refusal, replayed end to end through
`tpujob emulator fail-next` (tests/fixtures/gcp_errors/*.json, each with its source), as a user
sees them after `tpujob requeue`: a queued resource that ends FAILED (classified by its
failedData.error, never counted as a preemption), a zonal quota (only its zone is passed over),
a zone this project may not use (LOCATION_POLICY_VIOLATED), a missing reservation, a create
preempted under its operation (code 3), and billing / free trial / USER_PROJECT_DENIED, each
with its own fix."""

from __future__ import annotations

import json
import re
import time

import pytest
from reconcile_helpers import V5E, messages, payload, record, requeue_and_show, resources, spec_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CREATE_QR = "tpu.projects.locations.queuedResources.create"
EAST_A, EAST_B, WEST = "us-east5-a", "us-east5-b", "us-west1-c"  # zones that offer v5e


def requeue_until(cli, job_id: int, done, timeout: float = 30.0) -> dict:
    """`tpujob requeue` until `done(shown)` (a queued resource fails a moment after it is queued)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = requeue_and_show(cli, job_id)
        if done(shown):
            return shown
        assert time.monotonic() < deadline, messages(shown)
        time.sleep(0.2)


def ends(shown: dict) -> list:
    return [a["end_reason"] for a in shown["attempts"]]


def zones(shown: dict) -> list:
    return [a["zone"] for a in shown["attempts"]]


def first_ended(shown: dict) -> bool:
    return bool(shown["attempts"]) and shown["attempts"][0]["end_reason"] is not None


def test_a_queued_resource_failed_for_capacity_is_a_capacity_miss_not_a_preemption(
        cli, ctx, replay, tmp_path, local_cloud, project):
    job = record(ctx, tmp_path, name="qr-stockout", accelerator=V5E, zone=EAST_A, queued=True, fallback=[WEST])
    replay("stockout_in_operation", method=CREATE_QR, in_operation=True)
    shown = requeue_until(cli, job.id, first_ended)
    assert ends(shown)[0] == "no_capacity" and shown["preemptions"] == 0
    assert zones(shown)[:2] == [EAST_A, WEST]  # the next placement
    said = messages(shown)
    assert re.search(r"queued resource failed: queued resource tpujob-\S+ FAILED \(stateInitiator SERVICE\): "
                     r'ResourceExhausted: There is no more capacity in the zone "europe-west4-a"', said), said
    assert "capacity miss 1 of" in said and "preemption" not in said
    first = shown["attempts"][0]["slice_name"]
    assert ("queuedResources", EAST_A, first) not in resources(local_cloud, project, (EAST_A,))  # freed


def test_a_queued_resource_failed_on_a_zonal_quota_moves_to_the_same_regions_other_zone(
        cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="qr-zone-quota", accelerator=V5E, zone=EAST_A, queued=True,
                 fallback=[EAST_B, WEST])
    replay("quota_zone", method=CREATE_QR, in_operation=True)
    shown = requeue_until(cli, job.id, first_ended)
    # A PerProjectPerZone quota says nothing of us-east5-b: not skipped as a regional one would be.
    assert ends(shown)[0] == "no_zone_quota" and zones(shown)[:2] == [EAST_A, EAST_B]
    assert shown["state"] == "PROVISIONING" and shown["preemptions"] == 0
    assert re.search(r"quota exhausted: queued resource .*TPUV5sLitepodServingPerProjectPerZoneForTPUAPI.* "
                     r"Limit 4 in zone us-central1-a.*; trying a placement in another zone", messages(shown))


def test_a_queued_resource_failed_on_a_users_error_fails_the_job_with_googles_message(
        cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="qr-refused", accelerator=V5E, zone=EAST_A, queued=True)
    replay("permission_denied", method=CREATE_QR, in_operation=True)
    shown = requeue_until(cli, job.id, lambda s: s["state"] == "FAILED")
    assert (shown["end_reason"], ends(shown), shown["preemptions"]) == ("user_error", ["refused"], 0)
    assert "refused: queued resource" not in messages(shown)  # it was accepted, then failed
    assert re.search(r"the cloud refused the slice: queued resource \S+ FAILED .*PermissionDenied: Permission "
                     r"'tpu.nodes.create' denied .*roles/tpu.admin", messages(shown)), messages(shown)


def test_a_regional_quota_in_a_zone_of_the_same_region_is_still_passed_over(cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="region-quota", accelerator=V5E, zone=EAST_A, fallback=[EAST_B, WEST])
    replay("quota_limit_region")
    shown = requeue_and_show(cli, job.id)
    assert ends(shown)[0] == "no_quota" and zones(shown)[:2] == [EAST_A, WEST]


def test_a_zone_the_project_may_not_use_moves_to_the_next_placement(cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="location", accelerator=V5E, zone=EAST_A, fallback=[WEST])
    replay("location_policy_violated")
    shown = requeue_and_show(cli, job.id)
    assert ends(shown)[0] == "location_denied" and zones(shown)[:2] == [EAST_A, WEST]
    said = messages(shown)
    assert "this project may not use zone us-central2-b" in said and "trying the next placement" in said
    assert "gcloud auth" not in said


def test_a_zone_the_project_may_not_use_at_the_end_is_a_config_error_naming_it(
        cli, ctx, replay, spec_file):
    replay("location_policy_violated")
    result = cli("create", spec_file(spec_text("location-end", accelerator=V5E, zone=EAST_A)), "--json")
    assert result.code == 6, result.err
    assert "may not use zone us-central2-b" in result.error_line and "gcloud auth" not in result.error_line
    (job,) = ctx.store.list_jobs(include_ended=True)
    assert (job.state, job.end_reason) == ("FAILED", "user_error")


def test_a_missing_reservation_moves_to_the_next_placement_saying_so(cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="reservation", accelerator=V5E, zone=EAST_A, fallback=[WEST])
    replay("reservation_required")
    shown = requeue_and_show(cli, job.id)
    assert ends(shown)[0] == "unavailable" and zones(shown)[:2] == [EAST_A, WEST]
    assert re.search(r"this placement is refused: .*A target reservation must be specified.*\(a reservation "
                     r"problem.*\); trying the next placement", messages(shown)), messages(shown)


def test_a_create_preempted_under_its_operation_counts_a_preemption(cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="code3", accelerator=V5E, zone=EAST_A)
    replay("preempted_code_3")
    shown = requeue_and_show(cli, job.id)
    assert ends(shown)[0] == "preempted" and shown["preemptions"] == 1
    assert shown["state"] != "FAILED" and len(shown["attempts"]) >= 1
    assert "update is not supported while in state PREEMPTED" in messages(shown)
    assert "preemption 1 of 5 allowed" in messages(shown)


@pytest.mark.parametrize("name, fix", [
    ("billing_disabled", "gcloud billing projects link 1051023892108 --billing-account=ACCOUNT_ID"),
    ("free_trial_billing", "Cloud TPU is not available on a free-trial billing account: upgrade it"),
    ("user_project_denied", "grant it roles/serviceusage.serviceUsageConsumer there"),
])
def test_billing_and_project_use_refusals_name_their_own_fix(cli, ctx, replay, tmp_path, spec_file, name, fix):
    job = record(ctx, tmp_path, name=name.replace("_", "-"), accelerator=V5E, zone=EAST_A)
    replay(name)
    shown = requeue_and_show(cli, job.id)
    assert (shown["state"], shown["end_reason"], ends(shown)) == ("FAILED", "user_error", ["refused"])
    assert fix in messages(shown)
    assert "gcloud auth" not in messages(shown) and "check the project and the account's roles" not in messages(shown)
    replay(name)
    created = cli("create", spec_file(spec_text(name.replace("_", "-") + "-c", accelerator=V5E, zone=EAST_A)), "--json")
    assert created.code == 6 and fix in created.error_line


def test_every_new_fixture_names_its_source():
    for name in ("location_policy_violated", "quota_zone", "billing_disabled", "free_trial_billing",
                 "user_project_denied", "preempted_code_3", "reservation_required"):
        assert payload(name)["source"].strip()
    assert json.dumps(payload("location_policy_violated")["metadata"]).count("us-central2-b") == 1
