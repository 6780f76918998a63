"""Multi-host slices on the Compute Engine path (ComputeTpuCloud) against the emulator: one
name for a workload policy, an instance template and a BULK MIG; their bodies as sent; the
slice's phases from the MIG and its VMs; deletion of all three; gc's view of them."""

from __future__ import annotations

import time

import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import ConflictError, StockoutError, UsageError

PROJECT, ZONE, REGION = "tpujob-test", "us-east5-a", "us-east5"  # us-east5-a offers v6e


@pytest.fixture
def compute(server):
    from tpujob.cloud.compute_tpu import ComputeTpuCloud

    return ComputeTpuCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01,
                                        labels={"tpujob-store": "s1"})


def request(name: str, accelerator: str = "v6e-16", **fields) -> SliceRequest:
    # Bulk mode takes reservation-bound or flex-start templates only (bulk-create-instances-in-mig).
    fields.setdefault("provisioning", "reservation")
    if fields["provisioning"] == "reservation":
        fields.setdefault("reservation", "res1")
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator, api="compute",
                        runtime_version="", labels={"tpujob-job": "000001"}, ssh_keys=("tpujob:ssh-ed25519 AAAA k",),
                        **fields)


def migs(server):
    return server.emulator.migs


def until(compute, name: str, phase: SlicePhase, seconds: float = 10):
    deadline = time.monotonic() + seconds
    while True:
        seen = compute.get_slice(PROJECT, ZONE, name)
        if seen.phase is phase:
            return seen
        assert time.monotonic() < deadline, seen
        time.sleep(0.02)


def test_a_v6e_16_is_a_workload_policy_a_template_and_a_bulk_mig_of_four(compute, server):
    server.emulator.world.set_faults(None, provisioning_delay=0.3)
    operation = compute.request_node(request("tpujob-000001-1"))
    assert operation.startswith(f"projects/{PROJECT}/zones/{ZONE}/operations/")
    policy = migs(server).get_policy(PROJECT, REGION, "tpujob-000001-1")
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "4x4"}
    template = migs(server).get_template(PROJECT, "tpujob-000001-1")["properties"]
    assert template["machineType"] == "ct6e-standard-4t"  # a bare name in a template
    [boot] = template["disks"]
    assert boot["boot"] and boot["autoDelete"]
    assert boot["initializeParams"] == {
        "sourceImage": ("projects/ubuntu-os-accelerator-images/global/images/family/"
                        "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
        "diskType": "hyperdisk-balanced", "diskSizeGb": "100"}
    assert template["scheduling"] == {"onHostMaintenance": "TERMINATE", "provisioningModel": "RESERVATION_BOUND",
                                      "automaticRestart": True, "instanceTerminationAction": "DELETE"}
    assert template["reservationAffinity"]["values"] == ["res1"]
    assert template["labels"] == {"tpujob-store": "s1", "tpujob-job": "000001"}
    assert template["metadata"]["items"] == [{"key": "enable-guest-attributes", "value": "TRUE"},
                                             {"key": "ssh-keys", "value": "tpujob:ssh-ed25519 AAAA k"}]
    assert template["serviceAccounts"] == [{"email": "default",
                                            "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    mig = migs(server).get_mig(PROJECT, ZONE, "tpujob-000001-1")
    assert {k: mig[k] for k in ("baseInstanceName", "targetSize", "instanceTemplate", "targetSizePolicy",
                                "instanceLifecyclePolicy", "resourcePolicies")} == {
        "baseInstanceName": "tpujob-000001-1", "targetSize": 4,
        "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/tpujob-000001-1",
        "targetSizePolicy": {"mode": "BULK"},
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
        "resourcePolicies": {"workloadPolicy": f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/tpujob-000001-1"}}

    assert compute.get_slice(PROJECT, ZONE, "tpujob-000001-1").phase is SlicePhase.PROVISIONING
    assert compute.operation_done(operation, "creating", create=True)
    ready = until(compute, "tpujob-000001-1", SlicePhase.READY)
    names = sorted(m["name"] for m in migs(server).list_managed(PROJECT, ZONE, "tpujob-000001-1")["managedInstances"])
    vms = [server.emulator.vms.get(PROJECT, ZONE, n) for n in names]
    assert [h.index for h in ready.hosts] == [0, 1, 2, 3]
    # Hosts by TPU worker id (each VM's tpu-env WORKER_ID), worker 0 the coordinator, not by name.
    worker = {vm["name"]: int(next(i["value"] for i in vm["metadata"]["items"] if i["key"] == "tpu-env")
                              .split("WORKER_ID: '")[1].split("'")[0]) for vm in vms}
    by_worker = sorted(vms, key=lambda vm: worker[vm["name"]])
    assert [h.ip for h in ready.hosts] == [vm["networkInterfaces"][0]["networkIP"] for vm in by_worker]
    assert by_worker != sorted(vms, key=lambda vm: vm["name"])
    assert ready.accelerator_type == "ct6e-standard-4t" and ready.labels["tpujob-job"] == "000001"
    assert compute.host_keys(PROJECT, ZONE, "tpujob-000001-1") == {0: [], 1: [], 2: [], 3: []}


def test_a_stopped_vm_makes_the_slice_lost_and_delete_takes_all_three(compute, server):
    # A BULK MIG's VMs are reservation-bound or flex-start: lost by a stop (no preemption).
    compute.request_node(request("tpujob-000002-1"))
    until(compute, "tpujob-000002-1", SlicePhase.READY)
    [first, *_] = sorted(m["name"]
                         for m in migs(server).list_managed(PROJECT, ZONE, "tpujob-000002-1")["managedInstances"])
    server.emulator.vms.stop(PROJECT, ZONE, first)
    seen = compute.get_slice(PROJECT, ZONE, "tpujob-000002-1")
    assert seen.phase is SlicePhase.FAILED and first in seen.detail and "not preempted" in seen.detail
    assert compute.list_slices(PROJECT, ZONE)["tpujob-000002-1"].phase is SlicePhase.FAILED
    compute.delete_slice(PROJECT, ZONE, "tpujob-000002-1")
    for table in ("_policies", "_templates", "_migs"):
        assert getattr(migs(server), table) == {}
    assert server.emulator.vms.list(PROJECT, ZONE)["items"] == []
    assert compute.get_slice(PROJECT, ZONE, "tpujob-000002-1").phase is SlicePhase.GONE
    compute.delete_slice(PROJECT, ZONE, "tpujob-000002-1")  # twice: nothing left, no error


def test_a_vm_in_its_shutdown_makes_the_slice_stopping_then_preempted_once_stopped(compute, server):
    """Through a preemption notice a VM reads STOPPING (the emulator's PREEMPTING_STATUS) and its
    program may be writing its SIGTERM checkpoint: STOPPING, which no sweep deletes; TERMINATED
    after it is PREEMPTED."""
    from tpujob.emulator.apis.compute.tpu_vms import PREEMPTING_STATUS

    compute.request_node(request("tpujob-000011-1"))
    until(compute, "tpujob-000011-1", SlicePhase.READY)
    [*_, last] = sorted(m["name"]
                        for m in migs(server).list_managed(PROJECT, ZONE, "tpujob-000011-1")["managedInstances"])
    vm = server.emulator.vms.find(f"projects/{PROJECT}/zones/{ZONE}/instances/{last}")
    vm.body["status"] = PREEMPTING_STATUS
    seen = compute.get_slice(PROJECT, ZONE, "tpujob-000011-1")
    assert (seen.phase, seen.detail) == (SlicePhase.STOPPING, f"{last}: STOPPING")
    vm.body["status"] = "TERMINATED"  # stopped with no preemption recorded: lost, not preempted
    assert compute.list_slices(PROJECT, ZONE)["tpujob-000011-1"].phase is SlicePhase.FAILED
    server.emulator.vms._record_preemption(vm)  # compute.instances.preempted on it
    assert compute.list_slices(PROJECT, ZONE)["tpujob-000011-1"].phase is SlicePhase.PREEMPTED
    compute.delete_slice(PROJECT, ZONE, "tpujob-000011-1")


def test_a_stocked_out_zone_fails_the_slice_with_a_typed_stockout(compute, server):
    server.emulator.world.stockout(ZONE, "ct6e-standard-4t", False)
    try:
        compute.request_node(request("tpujob-000003-1"))
        failed = until(compute, "tpujob-000003-1", SlicePhase.FAILED)
        assert isinstance(failed.failure, StockoutError)
        assert "ZONE_RESOURCE_POOL_EXHAUSTED" in failed.detail
        assert "does not have enough resources available" in str(failed.failure)
        listed = compute.list_slices(PROJECT, ZONE)["tpujob-000003-1"]
        assert listed.phase is SlicePhase.FAILED and isinstance(listed.failure, StockoutError)
    finally:
        server.emulator.world.stockout(ZONE, "ct6e-standard-4t", clear=True)
        compute.delete_slice(PROJECT, ZONE, "tpujob-000003-1")


def test_a_mig_whose_vms_run_is_ready_only_once_its_topology_is_active(compute, server, monkeypatch):
    # appliedAcceleratorTopologies[].state ACTIVATING: "being activated" (google-cloud-compute):
    # every VM runs and the MIG is stable, but it is no ICI slice yet.
    from tpujob.emulator.apis.compute.tpu_mig_rules import UNSOURCED

    monkeypatch.setitem(UNSOURCED, "topology_activation", 1000.0)
    server.emulator.world.set_faults(None, provisioning_delay=0.05)
    compute.request_node(request("tpujob-000012-1"))
    seen = until(compute, "tpujob-000012-1", SlicePhase.PROVISIONING)
    # The MIG and its VMs are two reads: the VMs may already run while the MIG read just before
    # them was not stable yet (no topology state to say). Every look until both agree is one
    # that must not call the slice READY.
    while "RUNNING" not in seen.node_state or "4/4" not in seen.node_state or not seen.detail:
        seen = compute.get_slice(PROJECT, ZONE, "tpujob-000012-1")
        assert seen.phase is SlicePhase.PROVISIONING, seen
    assert (seen.phase, seen.detail, seen.hosts) == (SlicePhase.PROVISIONING, "topology ACTIVATING", ())


@pytest.mark.parametrize("provisioning", ["spot", "on-demand"])
def test_a_spot_or_on_demand_multi_host_slice_is_refused_before_any_call(compute, provisioning):
    # "Bulk mode in MIGs is only supported with instance templates that specify either a
    # reservation-bound or flex-start provisioning model" (bulk-create-instances-in-mig).
    calls = compute.api_calls
    with pytest.raises(UsageError, match="flex-start or reservation"):
        compute.request_node(request("tpujob-000013-1", provisioning=provisioning))
    assert compute.api_calls == calls


def test_a_subnetwork_named_bare_reaches_the_template_as_its_regions_partial_url(compute, server):
    # NetworkInterface.subnetwork is "a full or partial URL" (google-cloud-compute); a global
    # template has no region for a bare name (ansible/ansible#28930).
    compute.request_node(request("tpujob-000014-1", subnetwork="tpu-subnet"))
    [nic] = migs(server).get_template(PROJECT, "tpujob-000014-1")["properties"]["networkInterfaces"]
    assert nic["subnetwork"] == f"regions/{REGION}/subnetworks/tpu-subnet"


def test_an_operation_error_without_an_http_status_is_typed_by_its_code():
    # Operation.httpErrorStatusCode is absent on some failed operations (compute.v1 discovery):
    # the code alone types it, as a MIG's errors are.
    from google.cloud import compute_v1

    from tpujob.cloud.disks import operation_failure

    op = compute_v1.Operation(status=compute_v1.Operation.Status.DONE, error=compute_v1.Error(errors=[
        compute_v1.Errors(code="ZONE_RESOURCE_POOL_EXHAUSTED", message="The zone does not have enough resources")]))
    assert isinstance(operation_failure(op, "creating x", create=True), StockoutError)


def test_a_retry_after_a_crash_before_the_mig_adopts_the_policy_and_template(compute, server, monkeypatch):
    inserted = []
    real = migs(server).insert_mig
    def counted(*args):  # MIGs made: a 409 makes none
        made = real(*args)
        inserted.append(args)
        return made

    monkeypatch.setattr(migs(server), "insert_mig", counted)
    crash = compute._migs.insert

    def crashed(*args, **kwargs):
        raise KeyboardInterrupt("killed between the template and the MIG")

    compute._migs.insert = crashed
    with pytest.raises(KeyboardInterrupt):
        compute.request_node(request("tpujob-000004-1"))
    assert migs(server).get_template(PROJECT, "tpujob-000004-1") and inserted == []
    compute._migs.insert = crash
    operation = compute.request_node(request("tpujob-000004-1"))
    assert compute.operation_done(operation, "creating", create=True) and len(inserted) == 1
    with pytest.raises(ConflictError):  # a second retry: the MIG exists, adopted by the caller
        compute.request_node(request("tpujob-000004-1"))
    assert len(inserted) == 1 and len(migs(server)._migs) == 1
    until(compute, "tpujob-000004-1", SlicePhase.READY)


def test_list_slices_shows_a_lone_vm_and_a_mig_as_two_slices(compute, server):
    compute.create_node(request("vm1", accelerator="v6e-8", provisioning="spot"))
    compute.request_node(request("tpujob-000005-1"))
    until(compute, "tpujob-000005-1", SlicePhase.READY)
    calls = compute.api_calls
    listed = compute.list_slices(PROJECT, ZONE)
    assert compute.api_calls - calls == 3  # instances, MIGs, one listManagedInstances
    assert sorted(listed) == ["tpujob-000005-1", "vm1"]
    assert listed["vm1"].phase is SlicePhase.READY and len(listed["vm1"].hosts) == 1
    assert listed["tpujob-000005-1"].phase is SlicePhase.READY and len(listed["tpujob-000005-1"].hosts) == 4
    kinds = sorted((r.kind, r.name) for r in compute.list_tpu_resources(PROJECT, ZONE))
    assert kinds == [("instance", "vm1"), ("mig", "tpujob-000005-1")]


def test_gc_sees_a_template_and_policy_left_without_their_mig(compute, server):
    """A create that crashed after its template: its template (by its labels) and its policy
    (by its name, labelled as its template) are listed, and deleted one by one."""
    name = "tpujob-a1b2c3-000006-1"  # tpujob/names.py slice_name: a policy is told by it
    compute._insert_and_wait("policy", compute._policies.insert, f"projects/{PROJECT}/regions/{REGION}",
                             project=PROJECT, region=REGION,
                             resource_policy_resource=compute._workload_policy(request(name)))
    compute._insert_and_wait("template", compute._templates.insert, f"projects/{PROJECT}/global",
                             project=PROJECT, instance_template_resource=compute._template(request(name)))
    found = {(r.kind, r.name): r for r in compute.list_tpu_resources(PROJECT, ZONE)}
    assert sorted(found) == [("instance-template", name), ("workload-policy", name)]
    assert all(r.labels == {"tpujob-store": "s1", "tpujob-job": "000001"} for r in found.values())
    compute.delete_template(PROJECT, name)
    [alone] = compute.list_tpu_resources(PROJECT, ZONE)
    assert (alone.kind, alone.labels) == ("workload-policy", {"tpujob-job": "000006"})  # from its name
    compute.delete_workload_policy(PROJECT, REGION, name)
    assert compute.list_tpu_resources(PROJECT, ZONE) == []


def flex(name: str) -> SliceRequest:
    return request(name, provisioning="flex-start", max_run_duration_seconds=7200)


def recorded(server, monkeypatch) -> list:
    """The emulator's MIG-side calls, in order: (method, what it was given)."""
    calls = []
    for method in ("insert_policy", "insert_template", "insert_mig", "resize_mig"):
        real = getattr(migs(server), method)

        def record(*args, _real=real, _method=method):
            answer = _real(*args)  # a refusal (a 409) is not recorded
            calls.append((_method, args[-1]))
            return answer

        monkeypatch.setattr(migs(server), method, record)
    return calls


def test_a_flex_start_slice_is_a_mig_made_at_size_0_then_resized_to_its_hosts(compute, server, monkeypatch):
    calls = recorded(server, monkeypatch)
    server.emulator.world.set_faults(None, provisioning_delay=0.6)
    operation = compute.request_node(flex("tpujob-000007-1"))
    assert [c[0] for c in calls] == ["insert_policy", "insert_template", "insert_mig", "resize_mig"]
    template = calls[1][1]["properties"]["scheduling"]
    assert template == {"onHostMaintenance": "TERMINATE", "provisioningModel": "FLEX_START",
                        "automaticRestart": False, "instanceTerminationAction": "DELETE",
                        "maxRunDuration": {"seconds": "7200"}}
    assert calls[2][1] == {
        "name": "tpujob-000007-1", "baseInstanceName": "tpujob-000007-1", "targetSize": 0,
        "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/tpujob-000007-1",
        "targetSizePolicy": {"mode": "BULK"},
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
        "resourcePolicies": {"workloadPolicy": f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/tpujob-000007-1"}}
    assert calls[3][1] == 4  # resize?size=4: the host count, no body
    resize = migs(server).ops.get(PROJECT, ZONE, operation.rsplit("/", 1)[1])
    assert operation.startswith(f"projects/{PROJECT}/zones/{ZONE}/operations/") and resize["operationType"] == "resize"
    assert compute.operation_done(operation, "creating", create=True)
    assert compute.get_slice(PROJECT, ZONE, "tpujob-000007-1").phase is SlicePhase.QUEUED  # members PENDING
    ready = until(compute, "tpujob-000007-1", SlicePhase.READY)
    assert [h.index for h in ready.hosts] == [0, 1, 2, 3]


def test_a_stockout_keeps_a_flex_start_slice_queued_until_capacity_returns(compute, server):
    server.emulator.world.stockout(ZONE, "ct6e-standard-4t", False)
    try:
        compute.request_node(flex("tpujob-000008-1"))
        time.sleep(0.5)  # several of the emulator's tries
        for seen in (compute.get_slice(PROJECT, ZONE, "tpujob-000008-1"),
                     compute.list_slices(PROJECT, ZONE)["tpujob-000008-1"]):
            assert seen.phase is SlicePhase.QUEUED and seen.failure is None, seen
    finally:
        server.emulator.world.stockout(ZONE, "ct6e-standard-4t", clear=True)
    assert len(until(compute, "tpujob-000008-1", SlicePhase.READY).hosts) == 4
    compute.delete_slice(PROJECT, ZONE, "tpujob-000008-1")


def test_a_retried_flex_start_request_neither_creates_nor_resizes_twice(compute, server, monkeypatch):
    calls = recorded(server, monkeypatch)
    real = compute._migs.resize

    def crashed(*args, **kwargs):
        raise KeyboardInterrupt("killed between the MIG's insert and its resize")

    compute._migs.resize = crashed
    with pytest.raises(KeyboardInterrupt):
        compute.request_node(flex("tpujob-000009-1"))
    assert [c[0] for c in calls] == ["insert_policy", "insert_template", "insert_mig"]
    stuck = compute.get_slice(PROJECT, ZONE, "tpujob-000009-1")  # stable at 0: nothing under way
    assert stuck.phase is SlicePhase.PROVISIONING and "targetSize 0" in stuck.detail
    compute._migs.resize = real
    operation = compute.request_node(flex("tpujob-000009-1"))  # its 409s adopt; the MIG is resized
    assert [c[0] for c in calls] == ["insert_policy", "insert_template", "insert_mig", "resize_mig"]
    assert compute.operation_done(operation, "creating", create=True)
    with pytest.raises(ConflictError):  # grown already: adopted by the caller, not resized again
        compute.request_node(flex("tpujob-000009-1"))
    assert [c[0] for c in calls] == ["insert_policy", "insert_template", "insert_mig", "resize_mig"]
    assert len(migs(server)._migs) == 1
    until(compute, "tpujob-000009-1", SlicePhase.READY)


def test_a_mig_asked_to_grow_from_size_0_reads_queued(compute, server):
    """Between the resize and its VMs a MIG may read targetSize 0, not stable (how Google shows
    it is not known): waiting for capacity, not READY with no hosts nor FAILED."""
    from google.cloud import compute_v1

    mig = compute_v1.InstanceGroupManager(
        name="tpujob-000010-1", target_size=0, status=compute_v1.InstanceGroupManagerStatus(
            is_stable=False,
            bulk_instance_operation=compute_v1.InstanceGroupManagerStatusBulkInstanceOperation(in_progress=True)))
    seen = compute._mig_slice(PROJECT, ZONE, mig, [], {})
    assert seen.phase is SlicePhase.QUEUED and seen.hosts == ()
