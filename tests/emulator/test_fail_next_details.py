"""`fail-next` with the details Google's bodies carry (google.rpc.ErrorInfo {reason, domain,
metadata}, google.rpc.QuotaFailure {violations}), and a queued resource that is accepted, then
ends FAILED with the chosen error in failedData; what the cloud layer makes of each."""

from __future__ import annotations

import time

import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import LocationDenied, QuotaExceeded, StockoutError

PROJECT, ZONE = "tpujob-test", "us-central2-b"
NODES = f"/v2/projects/{PROJECT}/locations/{ZONE}/nodes"
CREATE = "tpu.projects.locations.nodes.create"
CREATE_QR = "tpu.projects.locations.queuedResources.create"
# sayouzone/gemma3-sft tpu/README.md: gcloud's TPU create in us-central2-b, ErrorInfo printed.
DENIED = "Permission denied on 'locations/us-central2-b' (or it may not exist)."
DENIED_INFO = {"consumer": "projects/sayouzone-ai", "location": "us-central2-b", "service": "tpu.googleapis.com"}


def request(name: str, queued: bool = False) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type="v4-8",
                        runtime_version="tpu-ubuntu2204-base", provisioning="spot", queued=queued)


@pytest.fixture
def cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)


def test_error_info_metadata_is_sent_as_google_sends_it(server, http, cloud):
    server.emulator.fail_next.queue(CREATE, 403, DENIED, reason="LOCATION_POLICY_VIOLATED", metadata=DENIED_INFO)
    code, answer = http("POST", f"{NODES}?nodeId=n1", {"acceleratorType": "v4-8", "runtimeVersion": "x"})
    assert code == 403 and answer["error"]["details"] == [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "LOCATION_POLICY_VIOLATED",
         "domain": "googleapis.com", "metadata": DENIED_INFO}]
    server.emulator.fail_next.queue(CREATE, 403, DENIED, reason="LOCATION_POLICY_VIOLATED", metadata=DENIED_INFO)
    with pytest.raises(LocationDenied, match="may not use zone us-central2-b") as info:
        cloud.create_node(request("n1"))
    assert info.value.zone == "us-central2-b" and info.value.exit_code == 6


def test_quota_failure_details_in_an_operation_reach_the_classifier(server, cloud):
    violation = {"subject": "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI",
                 "description": "Quota 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. "
                                "Limit 0 in zone us-central2-b"}
    server.emulator.fail_next.queue(CREATE, 429, "Quota exceeded for TPU", in_operation=True,
                              quota_violations=[violation])
    with pytest.raises(QuotaExceeded) as info:
        cloud.create_node(request("n2"))
    assert (info.value.scope, info.value.zone) == ("zone", "us-central2-b")


def test_a_queued_resource_is_accepted_then_ends_failed_with_the_chosen_error(server, cloud):
    server.emulator.fail_next.queue(CREATE_QR, 429, 'There is no more capacity in the zone "us-central2-b"; you '
                              "can try in another zone where Cloud TPU Nodes are offered", in_operation=True)
    cloud.create_queued_resource(request("q1", queued=True))  # its operation ends once queued: no error
    deadline = time.monotonic() + 10
    while (s := cloud.get_slice(PROJECT, ZONE, "q1")).phase is SlicePhase.QUEUED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert (s.phase, s.queued_resource_state) == (SlicePhase.FAILED, "FAILED")
    assert isinstance(s.failure, StockoutError) and "stateInitiator SERVICE" in str(s.failure)
    raw = server.emulator.tpu.get_queued_resource(f"projects/{PROJECT}/locations/{ZONE}/queuedResources/q1")
    assert raw["state"]["failedData"] == {"error": {"code": 8, "message": s.detail}}
    assert raw["state"]["stateInitiator"] == "SERVICE"
    cloud.delete_slice(PROJECT, ZONE, "q1")  # a FAILED queued resource is deleted without force
    assert cloud.get_slice(PROJECT, ZONE, "q1").phase is SlicePhase.GONE


@pytest.mark.parametrize("body, why", [
    ({"method": CREATE, "status": 403, "message": "m", "metadata": {"location": "z"}}, "need a reason"),
    ({"method": CREATE, "status": 403, "message": "m", "reason": "R", "metadata": {"n": 1}}, "strings"),
    ({"method": CREATE, "status": 429, "message": "m", "quota_violations": [{"subject": "q"}]},
     "QuotaFailure.violations"),
    ({"method": "compute.disks.insert", "status": 403, "message": "m", "reason": "R", "metadata": {"a": "b"}},
     "tpu.* methods only"),
])
def test_bad_details_are_refused(http, body, why):
    code, answer = http("POST", "/emulator/v1/fail-next", body)
    assert code == 400 and why in answer["error"]["message"]


def test_the_cli_takes_metadata_and_quota_violations(cli, local_cloud):
    result = cli("emulator", "fail-next", CREATE, "--status", "403", "--message", DENIED,
                 "--reason", "LOCATION_POLICY_VIOLATED", "--metadata", "location=us-central2-b",
                 "--metadata", "consumer=projects/p")
    assert result.code == 0, result.err
    bad = cli("emulator", "fail-next", CREATE, "--status", "429", "--message", "m", "--quota-violation", "q")
    assert bad.code == 2 and "--quota-violation takes KEY=VALUE" in bad.error_line
    local_cloud.clear_fail_next()
