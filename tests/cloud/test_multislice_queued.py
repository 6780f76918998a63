"""Several slices through one queued resource (`multisliceParams`), GcpCloud against the
emulator: the body sent, the nodes Google names for it, the queued resource and its nodes read
as one slice from queueing to preemption, and the requests the emulator refuses."""

from __future__ import annotations

import pytest
from cloud_helpers import PROJECT, ZONE, wait_for_slice

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.emulator.apis.errors import ApiError

LOC = f"projects/{PROJECT}/locations/{ZONE}"


def request(name: str, accelerator: str = "v4-16", slices: int = 2) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator,
                        runtime_version="tpu-ubuntu2204-base", queued=True, slices=slices)


def test_one_queued_resource_asks_for_every_slice_and_they_read_as_one(cloud, server):
    server.emulator.world.set_faults(None, provisioning_delay=0.15)
    queued = cloud.create_queued_resource(request("mq"))
    assert queued.phase is SlicePhase.QUEUED
    spec = server.emulator.tpu.get_queued_resource(f"{LOC}/queuedResources/mq")["tpu"]["nodeSpec"]
    assert [(s.get("nodeId"), s["multisliceParams"]) for s in spec] == [
        (None, {"nodeCount": 2, "nodeIdPrefix": "mq"})]

    seen = []
    ready = wait_for_slice(cloud, "mq", timeout=20, slices=2, on_change=lambda s: seen.append(s.phase))
    # Nodes still being made while the request provisions are coming, never lost.
    assert SlicePhase.GONE not in seen and seen[-1] is SlicePhase.READY, seen
    assert ready.queued_resource_state == "ACTIVE"
    assert [h.index for h in ready.hosts] == [0, 1, 2, 3]
    for k in (0, 1):
        node = server.emulator.tpu.get_node(f"{LOC}/nodes/mq-{k}")
        assert (node["multisliceNode"], node["queuedResource"]) == (True, f"{LOC}/queuedResources/mq")
    assert sorted(cloud.host_keys(PROJECT, ZONE, "mq", slices=2)) == [0, 1, 2, 3]


def test_one_slice_preempted_suspends_the_request_and_takes_every_slice(cloud, server):
    cloud.create_queued_resource(request("mp"))
    wait_for_slice(cloud, "mp", timeout=20, slices=2)
    server.emulator.host_faults.preempt("mp-1", grace_seconds=0)
    lost = cloud.get_slice(PROJECT, ZONE, "mp", slices=2)
    assert lost.phase is SlicePhase.PREEMPTED
    assert lost.queued_resource_state in ("SUSPENDING", "SUSPENDED")
    cloud.delete_slice(PROJECT, ZONE, "mp", slices=2)
    assert cloud.list_slices(PROJECT, ZONE) == {}
    assert cloud.get_slice(PROJECT, ZONE, "mp", slices=2).phase is SlicePhase.GONE


def test_a_multislice_request_past_its_valid_until_reads_failed_with_its_cause(cloud, server):
    from tpujob.errors import StockoutError

    server.emulator.world.set_faults(None, provisioning_delay=0.05)
    server.emulator.world.stockout(ZONE, "v4-16", clear=False)
    cloud.create_queued_resource(SliceRequest(
        project=PROJECT, zone=ZONE, name="mf", accelerator_type="v4-16", runtime_version="r",
        queued=True, slices=2, valid_until_seconds=1))
    failed = wait_for_slice(cloud, "mf", timeout=20, slices=2)
    assert failed.phase is SlicePhase.FAILED and isinstance(failed.failure, StockoutError)
    assert not {"mf-0", "mf-1"} & set(cloud.list_slices(PROJECT, ZONE))  # no node was made


def _body(spec: dict, accelerator: str = "v4-16") -> dict:
    return {"tpu": {"nodeSpec": [{"parent": LOC, **spec,
                                  "node": {"acceleratorType": accelerator, "runtimeVersion": "r"}}]}}


@pytest.mark.parametrize("spec, accelerator, words", [
    ({"multisliceParams": {"nodeCount": 1}}, "v4-16", "nodeCount must be > 1"),
    ({"nodeId": "x", "multisliceParams": {"nodeCount": 2}}, "v4-16", "exactly one of nodeId and multisliceParams"),
    ({}, "v4-16", "exactly one of nodeId and multisliceParams"),
    # Google's answer to multislice on v2 (AI-Hypercomputer/maxtext#158)
    ({"multisliceParams": {"nodeCount": 2}}, "v2-8", "Cloud TPU was unable to complete the operation"),
])
def test_the_emulator_refuses_what_a_multislice_request_may_not_say(server, spec, accelerator, words):
    zone_loc = LOC if accelerator != "v2-8" else f"projects/{PROJECT}/locations/us-central1-b"
    body = _body(spec, accelerator)
    body["tpu"]["nodeSpec"][0]["parent"] = zone_loc
    with pytest.raises(ApiError) as info:
        server.emulator.tpu.create_queued_resource(zone_loc, "bad", body)
    assert info.value.code == 400 and words in info.value.message
