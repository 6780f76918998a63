"""The emulator refuses labels Google refuses, on nodes, queued resources, disks and snapshots,
in each API's own wording, and creates nothing."""

from __future__ import annotations

LOC = "/v2/projects/p/locations/us-central2-b"
DISKS = "/compute/v1/projects/p/zones/us-central2-b/disks"
NODE = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}


def test_tpu_refuses_a_bad_label_value_on_a_node_and_a_queued_resource(http):
    code, body = http("POST", f"{LOC}/nodes?nodeId=n1", {**NODE, "labels": {"test-name": "r1.9"}})
    assert code == 400
    assert body["error"]["message"] == ('resource labels are invalid: value "r1.9" contains invalid '
                                        "character '.' at index 2 for key \"test-name\"")
    qr = {"tpu": {"nodeSpec": [{"parent": "projects/p/locations/us-central2-b", "nodeId": "q1",
                                "node": {**NODE, "labels": {"Owner": "x"}}}]}}
    code, body = http("POST", f"{LOC}/queuedResources?queuedResourceId=q1", qr)
    assert code == 400 and 'key "Owner"' in body["error"]["message"]
    code, body = http("POST", f"{LOC}/nodes?nodeId=n2", {**NODE, "labels": {"k": "x" * 64}})
    assert code == 400 and "longer than 63" in body["error"]["message"]
    assert http("GET", f"{LOC}/nodes")[1].get("nodes", []) == []
    assert http("GET", f"{LOC}/queuedResources")[1].get("queuedResources", []) == []


def test_compute_refuses_a_bad_label_value_on_a_disk_and_a_snapshot(http):
    code, body = http("POST", DISKS, {"name": "d", "type": "pd-balanced", "labels": {"job": "Helm"}})
    assert code == 400
    assert body["error"]["message"].startswith("Invalid value for field 'resource.labels': ''. Label "
                                               "value 'Helm' violates format constraints.")
    assert http("GET", DISKS)[1].get("items", []) == []
    assert http("POST", DISKS, {"name": "d", "type": "pd-balanced", "labels": {"tpujob-job": "000001"}})[0] == 200
    code, body = http("POST", "/compute/v1/projects/p/global/snapshots",
                      {"name": "s", "sourceDisk": "projects/p/zones/us-central2-b/disks/d",
                       "labels": {"tpujob-store": "a.b"}})
    assert code == 400 and "Label value 'a.b'" in body["error"]["message"]
