"""The classifier's table, row by row, with Google's own wordings (tests/fixtures/gcp_errors holds
the payloads with their sources): the typed error, its exit code, whether it is retried, and
what the message tells the user to do."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from tpujob.cloud.errors import RULES, classify, retryable
from tpujob.errors import (
    AuthError, CloudError, CloudRefused, InternalCreateError, PermissionDenied,
    PlacementUnavailable, QuotaExceeded, ServiceDisabled, StockoutError,
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
