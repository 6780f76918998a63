"""The classifier's table, row by row, with Google's own wordings (tests/fixtures/gcp_errors holds
the payloads with their sources): the typed error, its exit code, whether it is retried, and
what the message tells the user to do."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from tpujob.cloud.api_calls import classify, retryable
from tpujob.cloud.error_rules import RULES
from tpujob.errors import (
    AuthError,
    CloudError,
    CloudRefused,
    InternalCreateError,
    PermissionDenied,
    PlacementUnavailable,
    QuotaExceeded,
    ServiceDisabled,
    StockoutError,
)


def rest(status: int, message: str, reason: str | None = None, service: str | None = None):
    """What api_core raises for a REST answer (google.api_core.exceptions.format_http_response_error)."""
    info = None
    if reason:
        info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                "domain": "googleapis.com", "metadata": {"service": service} if service else {}}
    return gexc.from_http_status(status, message, details=[info] if info else [], error_info=info)


def operation(code: int, message: str):
    """What the TPU client raises for `{"done": true, "error": {"code", "message"}}`."""
    return gexc.from_grpc_status(code, message)


DISABLED = ("Cloud TPU API has not been used in project 123456 before or it is disabled. Enable it by "
            "visiting https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?project=123456 "
            "then retry.")


def test_403_permission_over_rest_names_the_permission_and_a_role():
    err = classify("creating node n1", rest(403, "Permission 'tpu.nodes.create' denied on "
                                                 "'projects/p/locations/us-central2-b/nodes/n1'"))
    assert type(err) is PermissionDenied and err.exit_code == 6
    assert "tpu.nodes.create" in str(err) and "roles/tpu.admin" in str(err)
    assert not retryable(rest(403, "Permission 'tpu.nodes.create' denied"))


def test_compute_403_permission_names_the_compute_role():
    err = classify("creating disk d", rest(403, "Required 'compute.disks.create' permission for "
                                               "'projects/p/zones/z/disks/d'"), "compute.googleapis.com")
    assert type(err) is PermissionDenied and "roles/compute.storageAdmin" in str(err)


def test_storage_403_names_the_storage_role():
    err = classify("listing gs://b/runs/", rest(403, "x@p.iam.gserviceaccount.com does not have "
                                                    "storage.objects.list access to the Google Cloud "
                                                    "Storage bucket."), "storage.googleapis.com")
    assert type(err) is PermissionDenied and "roles/storage.objectAdmin" in str(err)


def test_service_disabled_says_which_api_to_enable():
    by_text = classify("listing nodes in z", rest(403, DISABLED))
    by_reason = classify("creating disk d", rest(403, "Compute Engine API has not been used in "
                                                      "project 1 before or it is disabled.",
                                                 "SERVICE_DISABLED", "compute.googleapis.com"))
    assert type(by_text) is ServiceDisabled and by_text.exit_code == 6
    assert str(by_text).endswith("gcloud services enable tpu.googleapis.com")
    assert str(by_reason).endswith("gcloud services enable compute.googleapis.com")


def test_location_not_found_is_a_placement_naming_the_zone():
    err = classify("creating node n1", rest(403, "Location us-east1-d is not found or access is unauthorized."))
    assert type(err) is PlacementUnavailable and "location us-east1-d" in str(err)


def test_401_over_rest_is_an_auth_error():
    err = classify("creating node n1", rest(401, "Request had invalid authentication credentials."))
    assert type(err) is AuthError and err.exit_code == 6 and "gcloud auth" in str(err)


@pytest.mark.parametrize("text, region, zone", [
    ("Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5.",
     "us-east5", None),
    ("Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted.\n      Limit 20800 in region us-central2",
     "us-central2", None),
    ("Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' exhausted. Limit 4 in zone us-central1-a",
     None, "us-central1-a"),
])
def test_resource_quotas_carry_where_they_apply(text, region, zone):
    err = classify("creating node n1", rest(429, text))
    assert type(err) is QuotaExceeded and err.exit_code == 5
    assert (err.region, err.zone) == (region, zone)
    assert not retryable(rest(429, text))


def test_request_rate_quota_is_retried():
    assert retryable(rest(429, "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute'"))
    assert retryable(rest(429, "Maximum number of CreateNode requests per minute exceeded"))


def test_capacity_wordings_are_stockouts():
    stock = classify("creating node n1", operation(8, 'There is no more capacity in the zone "europe-west4-a"; '
                                                      "you can try in another zone"))
    reserved = classify("creating node n1", operation(9, "Insufficient reserved capacity. Contact customer "
                                                         "support to increase your reservation."))
    assert type(stock) is StockoutError and type(reserved) is StockoutError


def test_internal_ending_a_create_is_a_capacity_miss_elsewhere_retried():
    err = classify("creating node n1", operation(13, "An internal error has occurred"), create_operation=True)
    assert type(err) is InternalCreateError and isinstance(err, StockoutError)
    assert retryable(rest(500, "An internal error has occurred"))
    assert type(classify("deleting node n1", operation(13, "An internal error has occurred"))) is CloudError


@pytest.mark.parametrize("text", [
    'Cloud TPU received a bad request. The requested accelerator configuration for accelerator type, "v6e-1", '
    'could not be found in the zonal accelerator configurations for "europe-west4-b".; the accelerator v6e-1 '
    "was not found in zone europe-west4-b",
    'Cloud TPU received a bad request. The requested zone "asia-northeast1-a" is not supported.',
])
def test_placement_refusals_are_placement_unavailable(text):
    err = classify("creating node n1", rest(400, text))
    assert type(err) is PlacementUnavailable and isinstance(err, CloudRefused)


def test_other_bad_requests_are_plain_refusals():
    assert type(classify("creating node n1", rest(400, "runtimeVersion is required"))) is CloudRefused


def test_every_row_cites_a_source():
    assert all(rule.source and rule.behaviour for rule in RULES)


# --- issue 22: Google's answers that say more than their status (tests/fixtures/gcp_errors) ----

FIXTURES = __import__("pathlib").Path(__file__).resolve().parent.parent / "fixtures" / "gcp_errors"


def replayed(name: str):
    """A fixture as the client raises it: over REST api_core's exception with `details` (ErrorInfo
    reason/domain/metadata, QuotaFailure); in an operation, the google.rpc.Status through
    status_error (what tpu_api.py does for an operation's `error` and a queued resource's failedData)."""
    import json

    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    from tpujob.cloud.api_calls import status_error
    from tpujob.emulator.apis.fail_next import GRPC_CODES

    answer = json.loads((FIXTURES / f"{name}.json").read_text())
    info = None
    if answer["reason"]:
        info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": answer["reason"],
                "domain": answer.get("domain", "googleapis.com"), "metadata": answer.get("metadata", {})}
    if not answer["in_operation"]:
        return gexc.from_http_status(answer["status"], answer["message"], details=[info] if info else [],
                                     error_info=info)
    status = status_pb2.Status(code=GRPC_CODES[answer["grpc_status"]], message=answer["message"])
    if info:
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.ErrorInfo(reason=info["reason"], domain=info["domain"],
                                                metadata=info["metadata"]))
        status.details.append(packed)
    return status_error(status)


@pytest.mark.parametrize("name, typed, exit_code, said", [
    ("location_policy_violated", "LocationDenied", 6, "this project may not use zone us-central2-b"),
    ("quota_zone", "QuotaExceeded", 5, "Limit 4 in zone us-central1-a"),
    ("billing_disabled", "BillingDisabled", 6, "gcloud billing projects link 1051023892108"),
    ("free_trial_billing", "BillingDisabled", 6, "not available on a free-trial billing account"),
    ("user_project_denied", "PermissionDenied", 6,
     "grant it roles/serviceusage.serviceUsageConsumer there (gcloud projects add-iam-policy-binding "
     "bamboo-precept-lgxtn"),
    ("preempted_code_3", "SlicePreempted", 5, "update is not supported while in state PREEMPTED"),
    ("reservation_required", "ReservationUnavailable", 5, "a reservation problem"),
    ("oslogin_profile_full", "LoginProfileFull", 5, "gcloud compute os-login ssh-keys remove --key=KEY"),
    # Compute Engine refusals of a multi-host TPU slice's requests: refused for good, never retried.
    ("mig_needs_bulk", "CloudRefused", 5, "require BULK mode in target size policy"),
    ("tpu7x_placement_policy", "CloudRefused", 5, "Use workload policy instead."),
    ("standard_termination_action", "CloudRefused", 5, "standard provisioning model"),
])
def test_googles_answers_get_their_own_type_and_fix(name, typed, exit_code, said):
    err = classify("creating node n1", replayed(name), create_operation=True)
    assert (type(err).__name__, err.exit_code) == (typed, exit_code)
    assert said in str(err)
    # Never the generic advice a role or a login problem gets.
    assert "gcloud auth" not in str(err) and "check the project and the account's roles" not in str(err)
    assert not retryable(replayed(name))


def test_the_zone_of_a_location_denial_comes_from_errorinfo_metadata_first():
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "LOCATION_POLICY_VIOLATED",
            "metadata": {"location": "europe-west4-b"}}
    err = classify("creating node n1", gexc.from_http_status(403, "Region access is unavailable.",
                                                             details=[info], error_info=info))
    assert err.zone == "europe-west4-b" and "may not use zone europe-west4-b" in str(err)


@pytest.mark.parametrize("text, scope", [
    ("Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' exhausted. Limit 4 in zone us-central1-a", "zone"),
    ("Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5.",
     "region"),
    ("Quota 'TPUV5PPreemptiblePerProjectPerZoneForTPUAPI' exhausted.", "zone"),  # the name alone says it
    ("Quota 'SOMETHING' exhausted.", None),
])
def test_a_quota_carries_its_scope(text, scope):
    assert classify("creating node n1", rest(429, text)).scope == scope


def test_quota_failure_violations_are_read_when_the_message_says_little():
    violation = {"subject": "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI",
                 "description": "Quota 'TPUV6EPreemptiblePerProjectPerZoneForTPUAPI' exhausted. "
                                "Limit 0 in zone us-east5-b"}
    detail = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}
    err = classify("creating node n1", gexc.from_http_status(429, "Quota exceeded.", details=[detail]))
    assert type(err) is QuotaExceeded and (err.scope, err.zone) == ("zone", "us-east5-b")
    assert "Limit 0 in zone us-east5-b" in str(err)


@pytest.mark.parametrize("text", [
    "Reservation not found",  # issue 22's wording (no public TPU payload found)
    "Reservation 'projects/p/zones/us-east5-a/reservations/r' does not exist.",
    "Cloud TPU received an invalid argument. A target reservation must be specified when the host project "
    "has at least one",  # hashicorp/terraform-provider-google#24153
])
def test_reservation_wordings_end_the_placement_saying_so(text):
    err = classify("creating node n1", rest(400, text))
    assert type(err).__name__ == "ReservationUnavailable" and isinstance(err, PlacementUnavailable)
    assert "a reservation problem" in str(err)
    # Not a reservation refusal: a stockout of reserved capacity stays a capacity miss.
    assert type(classify("creating node n1", operation(8, "Insufficient reserved capacity. Contact customer "
                                                          "support to increase your reservation."))) is StockoutError


COMPUTE_STOCKOUT = ("The zone 'projects/p/zones/us-east5-a' does not have enough resources available to "
                    "fulfill the request.  Try a different zone, or try again later.")


def compute_operation(status: int, code: str, message: str):
    """What tpujob.cloud.disks.operation_failure builds from a DONE Compute operation's
    errors[0] and httpErrorStatusCode."""
    return gexc.from_http_status(status, message, errors=[{"reason": code, "message": message}])


@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                                  "RESOURCE_POOL_EXHAUSTED"])
def test_a_compute_engine_capacity_miss_is_a_stockout_not_a_retried_503(code):
    err = classify("creating instance vm", compute_operation(503, code, COMPUTE_STOCKOUT),
                   "compute.googleapis.com", create_operation=True)
    assert type(err) is StockoutError and "does not have enough resources available" in str(err)


def test_a_compute_engine_reservation_without_room_or_missing_is_reservation_unavailable():
    from tpujob.errors import ReservationUnavailable

    for message in ("Specified reservation 'r1' does not exist.",
                    "Specified reservation 'r1' does not have available resources for the request."):
        err = classify("creating instance vm", compute_operation(412, "CONDITION_NOT_MET", message),
                       "compute.googleapis.com", create_operation=True)
        assert type(err) is ReservationUnavailable and "r1" in str(err), message


def test_a_compute_engine_tpu_quota_of_zero_is_quota_exceeded_for_the_region():
    # xbill9/gemma4-dev HARDWARE.md (a user's report): a v6e insert without
    # quota, "Quota 'TPUS_PER_TPU_FAMILY' exceeded. Limit: 0.0"; Compute's operation error code is
    # QUOTA_EXCEEDED (compute.v1 discovery, Errors), with the region Compute names after the limit.
    message = "Quota 'TPUS_PER_TPU_FAMILY' exceeded.  Limit: 0.0 in region us-east5."
    err = classify("creating instance vm", compute_operation(403, "QUOTA_EXCEEDED", message),
                   "compute.googleapis.com", create_operation=True)
    assert type(err) is QuotaExceeded and "TPUS_PER_TPU_FAMILY" in str(err)
    assert (err.region, err.scope) == ("us-east5", "region")
