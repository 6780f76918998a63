"""`fail-next`: the next calls of one method answer Google's error body, or succeed and end their
operation with it; what the cloud layer then raises."""

from __future__ import annotations

import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import (
    PermissionDenied,
    QuotaExceeded,
    ServiceDisabled,
    StockoutError,
    UsageError,
)

PROJECT, ZONE = "tpujob-test", "us-central2-b"
NODES = f"/v2/projects/{PROJECT}/locations/{ZONE}/nodes"
CREATE = "tpu.projects.locations.nodes.create"


def request(name: str) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type="v4-8",
                        runtime_version="tpu-ubuntu2204-base", provisioning="on-demand")


@pytest.fixture
def cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)


@pytest.fixture
def compute(server):
    from tpujob.cloud.disks import GcpCompute

    return GcpCompute.for_emulator(server.url)


def test_the_next_calls_answer_googles_error_body_then_the_method_works_again(server, http):
    server.emulator.fail_next.queue(CREATE, 403, "Permission 'tpu.nodes.create' denied on 'projects/p'",
                              reason="IAM_PERMISSION_DENIED", times=2)
    body = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}
    for _ in range(2):
        code, answer = http("POST", f"{NODES}?nodeId=n1", body)
        assert code == 403
        assert answer == {"error": {
            "code": 403, "message": "Permission 'tpu.nodes.create' denied on 'projects/p'",
            "status": "PERMISSION_DENIED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                         "reason": "IAM_PERMISSION_DENIED", "domain": "googleapis.com"}]}}
    assert http("GET", NODES) == (200, {"nodes": []})  # refused before anything was made
    assert http("POST", f"{NODES}?nodeId=n1", body)[0] == 200


def test_the_cloud_layer_reads_a_403_over_rest_as_permission_denied(server, cloud):
    server.emulator.fail_next.queue(CREATE, 403, "Permission 'tpu.nodes.create' denied on "
                                           f"'projects/{PROJECT}/locations/{ZONE}/nodes/n1'")
    with pytest.raises(PermissionDenied, match="tpu.nodes.create.*roles/tpu.admin") as info:
        cloud.create_node(request("n1"))
    assert info.value.exit_code == 6
    assert cloud.api_calls == 1  # not retried


def test_a_stockout_in_the_operation_leaves_no_node(server, cloud):
    server.emulator.fail_next.queue(CREATE, 429, 'There is no more capacity in the zone "us-central2-b"; you can '
                                           "try in another zone", in_operation=True)
    with pytest.raises(StockoutError, match="no more capacity"):
        cloud.create_node(request("n2"))
    assert cloud.get_slice(PROJECT, ZONE, "n2").phase is SlicePhase.GONE


def test_a_service_disabled_list_names_the_api_to_enable(server, cloud):
    server.emulator.fail_next.queue("tpu.projects.locations.queuedResources.list", 403,
                              "Cloud TPU API has not been used in project 1 before or it is disabled.",
                              reason="SERVICE_DISABLED")
    with pytest.raises(ServiceDisabled, match="gcloud services enable tpu.googleapis.com"):
        cloud.list_slices(PROJECT, ZONE)


def test_compute_answers_in_its_own_shape(server, http, compute):
    server.emulator.fail_next.queue("compute.disks.insert", 403, "Required 'compute.disks.create' permission "
                                                           f"for 'projects/{PROJECT}/zones/{ZONE}/disks/d1'")
    code, answer = http("POST", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/disks", {"name": "d1"})
    assert code == 403 and answer["error"]["errors"] == [
        {"message": answer["error"]["message"], "domain": "global", "reason": "forbidden"}]
    server.emulator.fail_next.queue("compute.disks.insert", 403, "Required 'compute.disks.create' permission")
    with pytest.raises(PermissionDenied, match="roles/compute.storageAdmin"):
        compute.create_disk(PROJECT, ZONE, "d1", disk_type="pd-balanced")


def test_a_compute_operation_can_end_with_a_quota_error(server, compute):
    server.emulator.fail_next.queue("compute.disks.insert", 403, "Quota 'SSD_TOTAL_GB' exceeded. Limit: 500.0 "
                              "in region us-central2.", reason="QUOTA_EXCEEDED", in_operation=True)
    with pytest.raises(QuotaExceeded) as info:
        compute.create_disk(PROJECT, ZONE, "d2", disk_type="pd-balanced")
    assert info.value.region == "us-central2"
    assert compute.find_disk(PROJECT, ZONE, "d2") is None


def test_a_transient_answer_is_retried_through(server, cloud):
    server.emulator.fail_next.queue("tpu.projects.locations.nodes.list", 503, "The service is unavailable", times=2)
    assert cloud.list_nodes(PROJECT, ZONE) == []


@pytest.mark.parametrize("body, why", [
    ({"method": "tpu.projects.locations.nodes.frobnicate", "status": 403, "message": "m"}, "unknown method"),
    ({"method": CREATE, "status": 200, "message": "m"}, "status must be"),
    ({"method": CREATE, "status": 403, "message": ""}, "message is required"),
    ({"method": CREATE, "status": 403, "message": "m", "grpc_status": "NOPE"}, "unknown grpc_status"),
    ({"method": "tpu.projects.locations.nodes.get", "status": 500, "message": "m", "in_operation": True},
     "no long-running operation"),
])
def test_bad_fault_requests_are_refused(http, body, why):
    code, answer = http("POST", "/emulator/v1/fail-next", body)
    assert code == 400 and why in answer["error"]["message"]
    assert http("GET", "/emulator/v1/fail-next") == (200, {"pending": []})


def test_the_client_reaches_the_endpoint(server):
    from tpujob.emulator.client import EmulatorClient

    client = EmulatorClient(server.url)
    pending = client.fail_next(CREATE, 500, "An internal error has occurred", in_operation=True, times=3)
    assert pending == {"pending": [{"method": CREATE, "status": 500, "grpcStatus": "INTERNAL",
                                    "inOperation": True, "timesLeft": 3}]}
    with pytest.raises(UsageError, match="unknown method"):
        client.fail_next("storage.objects.list", 403, "m")


def test_the_cli_lists_the_methods_and_refuses_unknown_ones_without_an_emulator(cli):
    listed = cli("emulator", "fail-next", "--list")
    assert listed.code == 0
    lines = listed.out.splitlines()
    assert f"{CREATE}  (--in-operation)" in lines and "compute.zoneOperations.wait" in lines
    assert "tpu.projects.locations.nodes.get" in lines
    assert "storage.* cannot fail" in lines[-1]
    bad = cli("emulator", "fail-next", "tpu.projects.locations.nodes.frobnicate", "--status", "403",
              "--message", "m")
    assert bad.code == 2 and "unknown method 'tpu.projects.locations.nodes.frobnicate'" in bad.error_line
    missing = cli("emulator", "fail-next", CREATE, "--status", "403")
    assert missing.code == 2 and "--status and --message are required" in missing.error_line
