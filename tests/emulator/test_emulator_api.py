"""The emulator's REST surface in Google's own JSON: paths, enums, operations, error bodies."""

from __future__ import annotations

import time

LOC = "/v2/projects/p/locations/us-central2-b"
NODE = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}


def wait_done(http, op: dict) -> dict:
    for _ in range(200):
        code, op = http("GET", f"/v2/{op['name']}")
        assert code == 200
        if op["done"]:
            return op
        time.sleep(0.01)
    raise AssertionError("operation never finished")


DISKS = "/compute/v1/projects/p/zones/us-central2-b/disks"
DISK = "projects/p/zones/us-central2-b/disks/d"


def test_create_node_operation_and_integer_enums(http):
    assert http("POST", DISKS, {"name": "d", "type": "pd-balanced"})[0] == 200
    body = {**NODE, "dataDisks": [{"sourceDisk": DISK, "mode": 2}],
            "schedulingConfig": {"spot": True}, "unknownField": 1}
    code, op = http("POST", f"{LOC}/nodes?nodeId=n1&$alt=json;enum-encoding=int", body)
    assert code == 200 and op["done"] is False
    assert op["name"].startswith("projects/p/locations/us-central2-b/operations/")
    assert op["metadata"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
    done = wait_done(http, op)
    assert done["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.Node"
    code, node = http("GET", f"{LOC}/nodes/n1")
    assert node["name"] == "projects/p/locations/us-central2-b/nodes/n1"
    assert node["state"] == "READY" and node["health"] == "HEALTHY"
    assert node["dataDisks"] == [{"sourceDisk": DISK, "mode": "READ_ONLY"}]
    assert "unknownField" not in node and node["apiVersion"] == "V2"
    code, listed = http("GET", f"{LOC}/nodes")
    assert [n["name"] for n in listed["nodes"]] == [node["name"]]


def test_a_data_disk_that_does_not_exist_refuses_the_create_and_creates_nothing(http):
    missing = "projects/p/zones/us-central2-b/disks/nope"
    body = {**NODE, "dataDisks": [{"sourceDisk": missing, "mode": "READ_WRITE"}]}
    code, answer = http("POST", f"{LOC}/nodes?nodeId=n1", body)
    assert code == 404
    assert answer["error"] == {"code": 404, "status": "NOT_FOUND",
                               "message": f"The resource '{missing}' was not found"}
    qr = {"tpu": {"nodeSpec": [{"parent": LOC[4:], "nodeId": "n2", "node": body}]}}
    assert http("POST", f"{LOC}/queuedResources?queuedResourceId=q1", qr)[0] == 404
    assert http("GET", f"{LOC}/nodes")[1] == {"nodes": []}
    assert http("GET", f"{LOC}/queuedResources")[1] == {"queuedResources": []}
    wait_done(http, http("POST", f"{LOC}/nodes?nodeId=n3", NODE)[1])
    # dataDisks is patched on v2alpha1 only (gcloud's alpha attach-disk; emulator/apis/tpu/node_updates.py)
    code, answer = http("PATCH", f"/v2alpha1/{LOC[4:]}/nodes/n3?updateMask=dataDisks", {**NODE, **body})
    assert code == 404 and answer["error"]["message"] == f"The resource '{missing}' was not found"
    assert "dataDisks" not in http("GET", f"{LOC}/nodes/n3")[1]


def test_delete_operation_ends_with_empty_and_the_node_is_gone(http):
    wait_done(http, http("POST", f"{LOC}/nodes?nodeId=n1", NODE)[1])
    done = wait_done(http, http("DELETE", f"{LOC}/nodes/n1")[1])
    assert done["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert http("GET", f"{LOC}/nodes")[1] == {"nodes": []}


def test_error_bodies_and_codes(http, server):
    code, body = http("GET", f"{LOC}/nodes/missing")
    assert code == 404 and body["error"]["status"] == "NOT_FOUND"
    assert body["error"]["code"] == 404 and "missing" in body["error"]["message"]
    http("POST", f"{LOC}/nodes?nodeId=n1", NODE)
    code, body = http("POST", f"{LOC}/nodes?nodeId=n1", NODE)
    assert code == 409 and body["error"]["status"] == "ALREADY_EXISTS"
    code, body = http("POST", f"{LOC}/nodes?nodeId=Bad_Id", NODE)
    assert code == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    code, body = http("POST", f"{LOC}/nodes?nodeId=n2", {"runtimeVersion": "x",
                                                         "acceleratorType": "v4-7"})
    assert code == 400 and "v4-7" in body["error"]["message"]
    server.emulator.world.set_faults(api_error_rate=1.0, provisioning_delay=None)
    statuses = {http("GET", f"{LOC}/nodes")[1]["error"]["status"] for _ in range(40)}
    assert statuses == {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}
    code, faults = http("GET", "/emulator/v1/faults")  # the switches themselves never fail
    assert code == 200 and faults["apiErrorRate"] == 1.0


def test_stocked_out_create_fails_its_operation_with_code_8(http, server):
    server.emulator.world.stockout("us-central2-b", None, clear=False)
    done = wait_done(http, http("POST", f"{LOC}/nodes?nodeId=n1", NODE)[1])
    assert done["error"]["code"] == 8
    assert 'no more capacity in the zone "us-central2-b"' in done["error"]["message"]
    assert http("GET", f"{LOC}/nodes/n1")[0] == 404


def test_queued_resource_json_and_delete_needs_force_while_active(http):
    qr = {"tpu": {"nodeSpec": [{"parent": "projects/p/locations/us-central2-b", "nodeId": "q1",
                                "node": NODE}]},
          "spot": {}, "queueingPolicy": {"validUntilDuration": "3600s"}}
    code, op = http("POST", f"{LOC}/queuedResources?queuedResourceId=q1", qr)
    assert code == 200 and op["done"] is True
    assert op["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
    for _ in range(200):
        body = http("GET", f"{LOC}/queuedResources/q1")[1]
        if body["state"]["state"] == "ACTIVE":
            break
        time.sleep(0.01)
    assert body["state"] == {"state": "ACTIVE"} and body["spot"] == {}
    assert http("GET", f"{LOC}/nodes/q1")[1]["queuedResource"] == body["name"]
    code, err = http("DELETE", f"{LOC}/queuedResources/q1")
    assert code == 400 and err["error"]["status"] == "FAILED_PRECONDITION"
    wait_done(http, http("DELETE", f"{LOC}/queuedResources/q1?force=true")[1])
    assert http("GET", f"{LOC}/queuedResources")[1] == {"queuedResources": []}
    assert http("GET", f"{LOC}/nodes")[1] == {"nodes": []}


def test_a_multislice_queued_resource_is_taken_and_a_malformed_parent_refused(http):
    qr = {"tpu": {"nodeSpec": [{"parent": LOC[4:], "multisliceParams": {"nodeCount": 2}, "node": NODE}]}}
    code, op = http("POST", f"{LOC}/queuedResources?queuedResourceId=m", qr)
    assert code == 200, op
    code, err = http("POST", f"{LOC}/queuedResources?queuedResourceId=m2",
                     {"tpu": {"nodeSpec": [{**qr["tpu"]["nodeSpec"][0], "parent": "x"}]}})
    assert code == 400 and "parent 'x'" in err["error"]["message"]


def test_status_endpoint_names_the_endpoints(http, server):
    code, status = http("GET", "/emulator/v1/status")
    assert code == 200
    assert status["tpu_endpoint"] == status["compute_endpoint"] == server.url
    assert status["project"] == "tpujob-local" and isinstance(status["ssh_port"], int)


def test_preempt_takes_a_grace_and_refuses_a_negative_one(http):
    wait_done(http, http("POST", f"{LOC}/nodes?nodeId=n1", NODE)[1])
    code, err = http("POST", "/emulator/v1/preempt", {"node": "n1", "graceSeconds": -1})
    assert code == 400 and "graceSeconds" in err["error"]["message"]
    code, node = http("POST", "/emulator/v1/preempt", {"node": "n1", "graceSeconds": 30})
    assert code == 200 and node["state"] == "PREEMPTED"
