"""What the emulator refuses as Google does, through the real client: an accelerator its zone
does not offer (or a zone with no TPUs), an update of a preempted node; and a preempted queued
resource's life cycle (SUSPENDING, then SUSPENDED with its node gone)."""

from __future__ import annotations

import re
import time

import pytest

from tpujob.cloud.base import SliceRequest
from tpujob.errors import PlacementUnavailable

PROJECT = "p"


def cloud_for(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)


def request(zone: str, accelerator: str, name: str = "s1", queued: bool = False) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=zone, name=name, accelerator_type=accelerator,
                        runtime_version="v2-alpha-tpuv6e", queued=queued)


UNOFFERED = re.compile(
    r'^creating node s1: BadRequest: .*Cloud TPU received a bad request\. The requested accelerator '
    r'configuration for accelerator type, "v6e-1", could not be found in the zonal accelerator '
    r'configurations for "europe-west4-b"\.; the accelerator v6e-1 was not found in zone '
    r'europe-west4-b \[EID: 0x[0-9a-f]{16}\]$')


def test_a_node_of_an_accelerator_its_zone_does_not_offer_is_refused_in_google_s_words(server):
    with pytest.raises(PlacementUnavailable) as caught:
        cloud_for(server).create_node(request("europe-west4-b", "v6e-1"))
    assert UNOFFERED.match(str(caught.value)), str(caught.value)
    assert server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/europe-west4-b") == []


def test_a_zone_with_no_tpus_is_refused_in_google_s_words(server):
    with pytest.raises(PlacementUnavailable) as caught:
        cloud_for(server).create_node(request("asia-northeast1-a", "v6e-1"))
    assert re.search(r'Cloud TPU received a bad request\. The requested zone "asia-northeast1-a" is not '
                     r"supported\. \[EID: 0x[0-9a-f]{16}\]$", str(caught.value)), str(caught.value)


def test_a_queued_resource_is_refused_at_create_not_queued_to_fail_later(server):
    # gcloud's queued-resources create answers INVALID_ARGUMENT itself, no operation issued.
    with pytest.raises(PlacementUnavailable) as caught:
        cloud_for(server).create_queued_resource(request("us-central2-b", "v6e-1", queued=True))
    assert 'could not be found in the zonal accelerator configurations for "us-central2-b"' in str(caught.value)
    assert server.emulator.tpu.list_queued_resources(f"projects/{PROJECT}/locations/us-central2-b") == []
    with pytest.raises(PlacementUnavailable, match='The requested zone "europe-west4-c" is not supported'):
        cloud_for(server).create_queued_resource(request("europe-west4-c", "v6e-1", queued=True))


def test_an_offered_placement_is_created(server):
    assert cloud_for(server).create_node(request("europe-west4-a", "v6e-1")).phase.value == "READY"


def _patch(http, name: str, body: dict, version: str = "v2alpha1", mask: str = "dataDisks") -> tuple[int, dict]:
    return http("PATCH", f"/{version}/projects/{PROJECT}/locations/us-central2-b/nodes/{name}?updateMask={mask}", body)


def test_updating_a_preempted_node_is_refused_failed_precondition(server, http):
    from tpujob.cloud.disks import GcpCompute

    cloud = cloud_for(server)
    cloud.create_node(SliceRequest(project=PROJECT, zone="us-central2-b", name="n1", accelerator_type="v4-8",
                                   runtime_version="tpu-ubuntu2204-base"))
    compute = GcpCompute.for_emulator(server.url, server.url)
    compute.create_disk(PROJECT, "us-central2-b", "data", disk_type="pd-balanced", size_gb=10)
    server.emulator.host_faults.preempt("n1")
    code, body = _patch(http, "n1", {"dataDisks": [
        {"sourceDisk": f"projects/{PROJECT}/zones/us-central2-b/disks/data", "mode": "READ_ONLY"}]})
    assert (code, body["error"]["status"]) == (400, "FAILED_PRECONDITION")
    assert "PREEMPTED" in body["error"]["message"]
    assert "dataDisks" not in server.emulator.tpu.get_node(f"projects/{PROJECT}/locations/us-central2-b/nodes/n1")


def test_a_preempted_queued_resource_reads_suspending_then_suspended_without_its_node(tmp_path):
    from tpujob.emulator.server import EmulatorServer

    # A provisioning delay long enough to see SUSPENDING while the node is being deleted.
    with EmulatorServer(tmp_path / "emulator", provisioning_delay=0.3, storage=False) as server:
        cloud = cloud_for(server)
        cloud.create_queued_resource(request("us-central2-b", "v4-8", name="q1", queued=True))
        deadline = time.monotonic() + 10
        while cloud.get_slice(PROJECT, "us-central2-b", "q1").queued_resource_state != "ACTIVE":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        server.emulator.host_faults.preempt("q1")
        seen = cloud.get_slice(PROJECT, "us-central2-b", "q1")
        assert (seen.queued_resource_state, seen.node_state, seen.phase.value) == (
            "SUSPENDING", "DELETING", "PREEMPTED")
        qr_name = f"projects/{PROJECT}/locations/us-central2-b/queuedResources/q1"
        assert server.emulator.tpu.get_queued_resource(qr_name)["state"]["stateInitiator"] == "SERVICE"
        while cloud.get_slice(PROJECT, "us-central2-b", "q1").queued_resource_state != "SUSPENDED":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        gone = cloud.get_slice(PROJECT, "us-central2-b", "q1")
        assert (gone.node_state, gone.hosts, gone.phase.value) == (None, (), "PREEMPTED")
        assert server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/us-central2-b") == []
        assert server.emulator.tpu.get_queued_resource(qr_name)["state"] == {
            "state": "SUSPENDED", "stateInitiator": "SERVICE"}
        cloud.delete_slice(PROJECT, "us-central2-b", "q1")  # it holds quota until deleted
        assert cloud.get_slice(PROJECT, "us-central2-b", "q1").phase.value == "GONE"


def test_accelerator_types_list_exactly_what_create_accepts(server):
    """One zone table: acceleratorTypes.list (what `doctor` reads) and the create refusal both read
    tpujob.catalogue.ZONES; e.g. v3 in us-central1-f, which Google's page lists."""
    listed = cloud_for(server).accelerator_types(PROJECT, "us-central1-f")
    assert "v3-8" in listed and "v2-8" in listed and "v6e-1" not in listed
    cloud_for(server).create_node(request("us-central1-f", "v3-8", name="v3"))
    assert [n["acceleratorType"] for n in server.emulator.tpu.list_nodes(
        f"projects/{PROJECT}/locations/us-central1-f")] == ["v3-8"]
    with pytest.raises(PlacementUnavailable):
        cloud_for(server).create_node(request("us-central1-f", "v6e-1"))


def test_v2_updates_only_the_documented_fields_and_v2alpha1_attaches_disks(server, http):
    """tpu.v2.json nodes.patch: "Supported fields: [description, tags, labels, metadata,
    network_config.enable_external_ips]"; gcloud's alpha attach-disk patches data_disks on
    v2alpha1 (emulator/apis/tpu/node_updates.py)."""
    from tpujob.cloud.disks import GcpCompute

    cloud = cloud_for(server)
    cloud.create_node(SliceRequest(project=PROJECT, zone="us-central2-b", name="n1", accelerator_type="v4-8",
                                   runtime_version="tpu-ubuntu2204-base"))
    compute = GcpCompute.for_emulator(server.url, server.url)
    compute.create_disk(PROJECT, "us-central2-b", "data", disk_type="pd-balanced", size_gb=10)
    disk = {"dataDisks": [{"sourceDisk": f"projects/{PROJECT}/zones/us-central2-b/disks/data",
                           "mode": "READ_ONLY"}]}
    code, body = _patch(http, "n1", disk, version="v2")
    assert (code, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert body["error"]["message"] == ("FieldMask path 'data_disks' must be one of the following: [description, "
                                        "tags, labels, metadata, network_config.enable_external_ips].")
    node = f"projects/{PROJECT}/locations/us-central2-b/nodes/n1"
    assert "dataDisks" not in server.emulator.tpu.get_node(node)
    code, body = _patch(http, "n1", {"labels": {"team": "a"}}, version="v2", mask="labels")
    assert code == 200 and server.emulator.tpu.get_node(node)["labels"] == {"team": "a"}
    code, body = _patch(http, "n1", disk)
    assert code == 200 and body["done"] and body["response"]["@type"].endswith("tpu.v2alpha1.Node")
    assert [d["sourceDisk"].rsplit("/", 1)[-1] for d in server.emulator.tpu.get_node(node)["dataDisks"]] == ["data"]
