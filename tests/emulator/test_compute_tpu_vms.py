"""Single-host TPU VMs through Compute Engine's instances API, driven by the real
google.cloud.compute_v1 clients (the path a user's code takes against Google)."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tpujob.emulator.server import EmulatorServer

PROJECT = "p"
ZONE = "us-east5-a"  # offers v6e and v5p (cloud.google.com/tpu/docs/regions-zones)
STOCKOUT = ("The zone 'projects/p/zones/us-east5-a' does not have enough resources available "
            "to fulfill the request.  Try a different zone, or try again later.")


def clients(url: str) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
    kwargs = dict(transport="rest", credentials=AnonymousCredentials(),
                  client_options={"api_endpoint": url})
    return compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(**kwargs)


def vm(name: str, machine: str = "ct6e-standard-1t", model: str = "STANDARD", nat: bool = False,
       guest_attributes: bool = True, **scheduling) -> compute_v1.Instance:
    nic = compute_v1.NetworkInterface(access_configs=[compute_v1.AccessConfig(
        name="External NAT", type_="ONE_TO_ONE_NAT")] if nat else [])
    return compute_v1.Instance(
        name=name, machine_type=f"zones/{ZONE}/machineTypes/{machine}", labels={"job": "j1"},
        network_interfaces=[nic],
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key="ssh-keys", value="u:ssh-ed25519 AAAA u")]
                                     + ([compute_v1.Items(key="enable-guest-attributes", value="TRUE")]
                                        if guest_attributes else [])),
        scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE", provisioning_model=model,
                                         **scheduling))


def insert(instances, ops, body: compute_v1.Instance) -> compute_v1.Operation:
    """insert, then zoneOperations.wait until DONE: the operation as it ended."""
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=body)
    for _ in range(50):
        done = ops.wait(project=PROJECT, zone=ZONE, operation=op.name)
        if done.status == compute_v1.Operation.Status.DONE:
            return done
    raise AssertionError("the insert operation never ended")


def listed(instances, filter_: str = "") -> list[str]:
    request = compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, filter=filter_)
    return [i.name for i in instances.list(request=request)]


@pytest.fixture
def api(server):
    return clients(server.url)


def test_insert_runs_a_vm_with_its_host_address_and_labels(server, api, http):
    instances, ops = api
    done = insert(instances, ops, vm("vm1", nat=True))
    assert not done.error.errors
    got = instances.get(project=PROJECT, zone=ZONE, instance="vm1")
    assert got.status == "RUNNING"
    assert got.machine_type.endswith(f"/zones/{ZONE}/machineTypes/ct6e-standard-1t")
    assert got.labels == {"job": "j1"} and got.scheduling.on_host_maintenance == "TERMINATE"
    code, hosts = http("GET", f"/emulator/v1/hosts?node=projects/{PROJECT}/zones/{ZONE}/instances/vm1")
    assert code == 200 and len(hosts["hosts"]) == 1
    nic = got.network_interfaces[0]
    assert nic.network_i_p == hosts["hosts"][0]["ip"]
    assert nic.access_configs[0].nat_i_p == hosts["hosts"][0]["externalIp"]
    assert listed(instances, "labels.job = j1") == ["vm1"]
    assert listed(instances, "labels.job = other") == []


def test_delete_removes_the_vm_and_its_host(server, api, http):
    instances, ops = api
    insert(instances, ops, vm("vm1"))
    op = instances.delete(project=PROJECT, zone=ZONE, instance="vm1")
    assert ops.wait(project=PROJECT, zone=ZONE, operation=op.name).status == compute_v1.Operation.Status.DONE
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="vm1")
    code, _ = http("GET", f"/emulator/v1/hosts?node=projects/{PROJECT}/zones/{ZONE}/instances/vm1")
    assert code == 404


@pytest.mark.parametrize("machine, zone, message", [
    ("ct6e-standard-4t", "us-central1-a",  # v5p's zone, not v6e's
     "Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/"
     "ct6e-standard-4t'. Machine type with name 'ct6e-standard-4t' does not exist in zone "
     "'us-central1-a'."),
    ("tpu7x-standard-4t", "us-east5-a",
     "Invalid value for field 'resource.machineType': 'zones/us-east5-a/machineTypes/"
     "tpu7x-standard-4t'. Machine type with name 'tpu7x-standard-4t' does not exist in zone "
     "'us-east5-a'."),
    ("ct5lp-hightpu-1t", "us-central1-a",
     "This user agent is not allowed to use the machine type [ct5lp-hightpu-1t]"),
])
def test_a_machine_type_the_zone_does_not_offer_is_refused(api, machine, zone, message):
    instances, _ = api
    body = vm("vm1", machine=machine)
    body.machine_type = f"zones/{zone}/machineTypes/{machine}"
    with pytest.raises(exceptions.BadRequest) as err:
        instances.insert(project=PROJECT, zone=zone, instance_resource=body)
    assert err.value.message.endswith(f"/instances: {message}")  # the client prefixes the call
    assert err.value.errors[0]["reason"] == "invalid"


def test_tpu7x_runs_in_its_zone(server):
    instances, ops = clients(server.url)
    body = vm("x1", machine="tpu7x-standard-4t")
    body.machine_type = "zones/us-central1-c/machineTypes/tpu7x-standard-4t"
    op = instances.insert(project=PROJECT, zone="us-central1-c", instance_resource=body)
    assert not ops.wait(project=PROJECT, zone="us-central1-c", operation=op.name).error.errors


def test_live_migration_and_flex_start_without_duration_are_refused(api):
    instances, _ = api
    body = vm("vm1")
    body.scheduling.on_host_maintenance = "MIGRATE"
    with pytest.raises(exceptions.BadRequest, match="do not support live migration"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=body)
    body = vm("vm1")
    body.scheduling = compute_v1.Scheduling(provisioning_model="STANDARD")  # MIGRATE by default
    with pytest.raises(exceptions.BadRequest, match="do not support live migration"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=body)
    with pytest.raises(exceptions.BadRequest, match="maxRunDuration"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("vm1", model="FLEX_START"))
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="vm1")


def test_a_stockout_ends_the_insert_with_googles_error_and_leaves_no_vm(server, api, http):
    instances, ops = api
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "ct6e-standard-1t"})
    done = insert(instances, ops, vm("vm1"))
    (error,) = done.error.errors
    assert (error.code, error.message) == ("ZONE_RESOURCE_POOL_EXHAUSTED", STOCKOUT)
    assert done.http_error_status_code == 503
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="vm1")
    assert not insert(instances, ops, vm("vm2", machine="ct5p-hightpu-4t")).error.errors


def test_flex_start_waits_pending_then_runs(server, api, http):
    instances, ops = api
    http("POST", "/emulator/v1/faults", {"provisioningDelay": 0.5})
    body = vm("flex", model="FLEX_START", instance_termination_action="DELETE",
              max_run_duration=compute_v1.Duration(seconds=3600))
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=body)
    assert instances.get(project=PROJECT, zone=ZONE, instance="flex").status == "PENDING"
    seen = set()
    while ops.get(project=PROJECT, zone=ZONE, operation=op.name).status != compute_v1.Operation.Status.DONE:
        seen.add(instances.get(project=PROJECT, zone=ZONE, instance="flex").status)
        time.sleep(0.05)
    assert {"PENDING", "STAGING"} <= seen
    got = instances.get(project=PROJECT, zone=ZONE, instance="flex")
    assert got.status == "RUNNING" and got.scheduling.max_run_duration.seconds == 3600


def flex_vm(name: str, wait: int | None = None) -> compute_v1.Instance:
    body = vm(name, model="FLEX_START", instance_termination_action="DELETE",
              max_run_duration=compute_v1.Duration(seconds=3600))
    if wait is not None:  # InstanceParams.requestValidForDuration: how long it may wait for capacity
        body.params = compute_v1.InstanceParams(request_valid_for_duration=compute_v1.Duration(seconds=wait))
    return body


def test_a_flex_start_vm_waits_in_a_stockout_only_when_its_insert_asks_to(server, api, http):
    instances, ops = api
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "ct6e-standard-1t"})
    (error,) = insert(instances, ops, flex_vm("unasked")).error.errors  # fails as any VM's insert
    assert (error.code, error.message) == ("ZONE_RESOURCE_POOL_EXHAUSTED", STOCKOUT)
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=flex_vm("asked", wait=7200))
    assert instances.get(project=PROJECT, zone=ZONE, instance="asked").status == "PENDING"
    assert ops.get(project=PROJECT, zone=ZONE, operation=op.name).status != compute_v1.Operation.Status.DONE
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "ct6e-standard-1t", "clear": True})
    while ops.wait(project=PROJECT, zone=ZONE, operation=op.name).status != compute_v1.Operation.Status.DONE:
        pass
    assert instances.get(project=PROJECT, zone=ZONE, instance="asked").status == "RUNNING"


def test_a_termination_action_on_a_standard_vm_without_a_time_limit_is_refused(api):
    # cluster-toolkit#4435 quotes Google's 400 (tests/fixtures/gcp_errors/standard_termination_action.json).
    instances, _ = api
    with pytest.raises(exceptions.BadRequest, match="standard provisioning model"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("std", instance_termination_action="STOP"))


def test_a_flex_start_wait_outside_90_s_to_2_h_is_refused(api):
    instances, _ = api
    with pytest.raises(exceptions.BadRequest, match="requestValidForDuration"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=flex_vm("short", wait=30))


def reserved(name: str, ref: str = f"projects/{PROJECT}/reservations/res1") -> compute_v1.Instance:
    body = vm(name, model="RESERVATION_BOUND", instance_termination_action="DELETE")
    body.reservation_affinity = compute_v1.ReservationAffinity(
        consume_reservation_type="SPECIFIC_RESERVATION", key="compute.googleapis.com/reservation-name",
        values=[ref])
    return body


def test_a_reservation_must_exist_and_have_room(server, api, http):
    instances, ops = api
    (error,) = insert(instances, ops, reserved("vm1")).error.errors
    assert (error.code, error.message) == (
        "CONDITION_NOT_MET", f"Specified reservation 'projects/{PROJECT}/reservations/res1' does not exist.")
    code, _ = http("POST", "/emulator/v1/reservations", {"project": PROJECT, "zone": ZONE, "name": "res1",
                                                         "machineType": "ct6e-standard-1t", "count": 1})
    assert code == 200
    assert not insert(instances, ops, reserved("vm1")).error.errors
    (error,) = insert(instances, ops, reserved("vm2")).error.errors
    assert error.code == "CONDITION_NOT_MET" and "does not have available resources" in error.message


@pytest.mark.parametrize("ref", ["res2/reservationBlocks/res2-block-0001",
                                 f"projects/{PROJECT}/reservations/res2/reservationBlocks/res2-block-0001",
                                 "projects/123456789012/reservations/res2"])
def test_a_reservation_named_with_its_block_or_project_number_is_consumed(server, api, http, ref):
    # RESERVATION[/reservationBlocks/BLOCK] (xpk's reservation path; users' gcloud --reservation), a
    # shared one as projects/P/reservations/R (ReservationAffinity.values), P an id or a number.
    instances, ops = api
    http("POST", "/emulator/v1/reservations", {"project": PROJECT, "zone": ZONE, "name": "res2",
                                               "machineType": "ct6e-standard-1t", "count": 1})
    assert not insert(instances, ops, reserved("vm3", ref)).error.errors


def test_preempting_a_spot_vm_terminates_it_and_its_host(server, api, http):
    instances, ops = api
    insert(instances, ops, vm("spot", model="SPOT"))
    ref = f"projects/{PROJECT}/zones/{ZONE}/instances/spot"
    code, body = http("POST", "/emulator/v1/preempt", {"node": ref, "graceSeconds": 0})
    assert code == 200 and body["status"] == "TERMINATED"
    assert instances.get(project=PROJECT, zone=ZONE, instance="spot").status == "TERMINATED"
    assert http("GET", f"/emulator/v1/hosts?node={ref}")[1]["hosts"] == []
    # A standard VM is not preempted.
    insert(instances, ops, vm("std"))
    code, _ = http("POST", "/emulator/v1/preempt", {"node": ref.replace("spot", "std")})
    assert code == 400

    # The preemption, and only it, leaves a compute.instances.preempted operation on the VM; a stop
    # (instances.stop) leaves its own, of type "stop".
    assert instances.stop(project=PROJECT, zone=ZONE, instance="std").operation_type == "stop"
    assert instances.get(project=PROJECT, zone=ZONE, instance="std").status == "TERMINATED"
    found = list(ops.list(request=compute_v1.ListZoneOperationsRequest(
        project=PROJECT, zone=ZONE, filter='operationType="compute.instances.preempted"')))
    assert [(o.target_link.rsplit("/", 1)[1], o.status_message) for o in found] == [("spot", "Instance was preempted.")]


def test_host_faults_take_a_vm_by_the_slice_name_tpujob_show_prints(server, api, http):
    """`tpujob show` names a Compute Engine slice by its VM's name: preempt, and every host fault,
    take that name as they take a TPU node's id, not only the instance's resource name."""
    instances, ops = api
    insert(instances, ops, vm("spot", model="SPOT"))
    code, body = http("GET", "/emulator/v1/hosts?node=spot")
    assert code == 200 and [h["index"] for h in body["hosts"]] == [0]
    code, body = http("POST", "/emulator/v1/preempt", {"node": "spot", "graceSeconds": 0})
    assert code == 200 and body["status"] == "TERMINATED"
    assert instances.get(project=PROJECT, zone=ZONE, instance="spot").status == "TERMINATED"
    assert http("POST", "/emulator/v1/preempt", {"node": "nothing"})[0] == 404


def test_a_spot_vm_with_delete_action_disappears_when_preempted(server, api, http):
    instances, ops = api
    insert(instances, ops, vm("spot", model="SPOT", instance_termination_action="DELETE"))
    ref = f"projects/{PROJECT}/zones/{ZONE}/instances/spot"
    assert http("POST", "/emulator/v1/preempt", {"node": ref, "graceSeconds": 0})[0] == 200
    deadline = time.monotonic() + 5
    while listed(instances) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listed(instances) == []


def test_fail_next_answers_the_insert_and_its_operation(server, api, http):
    instances, ops = api
    http("POST", "/emulator/v1/fail-next", {"method": "compute.instances.insert", "status": 403,
                                            "message": "Required 'compute.instances.create' permission"})
    with pytest.raises(exceptions.Forbidden, match="compute.instances.create"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("vm1"))
    http("POST", "/emulator/v1/fail-next", {"method": "compute.instances.insert", "status": 503,
                                            "reason": "ZONE_RESOURCE_POOL_EXHAUSTED",
                                            "message": STOCKOUT, "in_operation": True})
    (error,) = insert(instances, ops, vm("vm1")).error.errors
    assert (error.code, error.message) == ("ZONE_RESOURCE_POOL_EXHAUSTED", STOCKOUT)
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="vm1")


@pytest.mark.slow
def test_a_real_host_answers_and_publishes_its_key(tmp_path):
    from tpujob.emulator.machines.slice import SliceMachines

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=SliceMachines, preempt_grace=0.5) as srv:
        instances, ops = clients(srv.url)
        assert not insert(instances, ops, vm("real", model="SPOT")).error.errors
        ref = f"projects/{PROJECT}/zones/{ZONE}/instances/real"
        (host,) = srv.emulator.host_faults.hosts(ref)
        assert host["root"] and host["hostKey"]
        attrs = instances.get_guest_attributes(request=compute_v1.GetGuestAttributesInstanceRequest(
            project=PROJECT, zone=ZONE, instance="real", query_path="hostkeys/"))
        (item,) = attrs.query_value.items
        assert f"{item.key} {item.value}" == host["hostKey"]
        srv.emulator.host_faults.preempt(ref, 0.1)
        assert srv.emulator.host_faults.hosts(ref) == []
        op = instances.delete(project=PROJECT, zone=ZONE, instance="real")
        ops.wait(project=PROJECT, zone=ZONE, operation=op.name)
        assert not (tmp_path / "emu" / "instances" / PROJECT / ZONE / "real").exists()


def published_keys(instances, name: str) -> list[str]:
    attrs = instances.get_guest_attributes(request=compute_v1.GetGuestAttributesInstanceRequest(
        project=PROJECT, zone=ZONE, instance=name, query_path="hostkeys/"))
    return [f"{i.key} {i.value}" for i in attrs.query_value.items]


def test_only_a_vm_whose_metadata_enables_guest_attributes_publishes_its_host_key(tmp_path):
    # Guest attributes are off unless `enable-guest-attributes: TRUE` (Google's "Set and query
    # guest attributes" page): the other VM's key never appears, however long one waits.
    from test_compute_tpu_migs import RecordingMachines

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=RecordingMachines) as srv:
        instances, ops = clients(srv.url)
        assert not insert(instances, ops, vm("on")).error.errors
        assert not insert(instances, ops, vm("off", guest_attributes=False)).error.errors
        assert published_keys(instances, "on") == ["ssh-ed25519 KEY0"]
        assert published_keys(instances, "off") == []


def make_disk(url: str, name: str, zone: str = ZONE) -> None:
    disks = compute_v1.DisksClient(transport="rest", credentials=AnonymousCredentials(),
                                   client_options={"api_endpoint": url})
    disks.insert(project=PROJECT, zone=zone, disk_resource=compute_v1.Disk(
        name=name, size_gb=10, type_=f"zones/{zone}/diskTypes/hyperdisk-balanced")).result()


def disk_users(url: str, name: str) -> list[str]:
    disks = compute_v1.DisksClient(transport="rest", credentials=AnonymousCredentials(),
                                   client_options={"api_endpoint": url})
    return list(disks.get(project=PROJECT, zone=ZONE, disk=name).users)


def with_disk(body: compute_v1.Instance, name: str, mode: str) -> compute_v1.Instance:
    body.disks = [compute_v1.AttachedDisk(boot=True, auto_delete=True), compute_v1.AttachedDisk(
        source=f"projects/{PROJECT}/zones/{ZONE}/disks/{name}", mode=mode)]
    return body


def test_a_vms_data_disk_must_exist_and_is_held_until_the_vm_is_gone(server, api):
    instances, ops = api
    with pytest.raises(exceptions.BadRequest) as err:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=with_disk(vm("v1"), "data", "READ_WRITE"))
    assert (f"Invalid value for field 'resource.disks[1].source': 'projects/{PROJECT}/zones/{ZONE}/disks/data'. "
            "The referenced disk resource cannot be found.") in err.value.message
    assert listed(instances) == []

    make_disk(server.url, "data")
    assert insert(instances, ops, with_disk(vm("v1"), "data", "READ_WRITE")).error.errors == []
    (disk,) = [d for d in instances.get(project=PROJECT, zone=ZONE, instance="v1").disks if not d.boot]
    assert disk.source.endswith(f"/projects/{PROJECT}/zones/{ZONE}/disks/data") and disk.mode == "READ_WRITE"
    assert disk_users(server.url, "data") == ["v1"]
    # Held read-write by v1: no other VM may attach it, in either mode.
    with pytest.raises(exceptions.BadRequest) as err:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=with_disk(vm("v2"), "data", "READ_ONLY"))
    assert "is already being used by 'v1' in READ_WRITE mode" in err.value.message
    assert listed(instances) == ["v1"]

    instances.delete(project=PROJECT, zone=ZONE, instance="v1")
    deadline = time.monotonic() + 5
    while listed(instances):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert disk_users(server.url, "data") == []


def test_set_metadata_takes_the_current_fingerprint_only_and_changes_it(server, api, http):
    # Metadata.fingerprint (google-cloud-compute): it "changes after every request to modify or
    # update metadata"; a stale one fails "with error 412 conditionNotMet", and nothing changes.
    instances, ops = api
    assert not insert(instances, ops, vm("vm1")).error.errors
    path = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/vm1"
    first = instances.get(project=PROJECT, zone=ZONE, instance="vm1").metadata.fingerprint
    code, op = http("POST", f"{path}/setMetadata", {
        "fingerprint": first, "items": [{"key": "ssh-keys", "value": "u:ssh-ed25519 BBBB v"}]})
    assert code == 200 and op["kind"] == "compute#operation"
    got = instances.get(project=PROJECT, zone=ZONE, instance="vm1").metadata
    assert [(i.key, i.value) for i in got.items] == [("ssh-keys", "u:ssh-ed25519 BBBB v")]
    assert got.fingerprint and got.fingerprint != first
    code, body = http("POST", f"{path}/setMetadata", {"fingerprint": first, "items": []})
    assert code == 412
    assert body["error"]["errors"][0]["reason"] == "conditionNotMet"
    assert body["error"]["message"] == "Supplied fingerprint does not match current metadata fingerprint."
    with pytest.raises(exceptions.PreconditionFailed):
        instances.set_metadata(project=PROJECT, zone=ZONE, instance="vm1",
                               metadata_resource=compute_v1.Metadata(fingerprint=first))
    assert instances.get(project=PROJECT, zone=ZONE, instance="vm1").metadata.fingerprint == got.fingerprint
