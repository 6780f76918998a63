"""Multi-host TPU slices as BULK managed instance groups with a workload policy, through the
real google.cloud.compute_v1 clients."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tpujob.emulator.server import EmulatorServer

P, REGION, ZONE = "p", "us-central1", "us-central1-c"  # a TPU7x zone (regions-zones page)


def client(kind, url: str):
    return kind(transport="rest", credentials=AnonymousCredentials(),
                client_options={"api_endpoint": url})


def make_slice(url: str, topology: str = "2x2x2", mode: str = "BULK", size: int = 2,
               policy_ref: str | None = None, name: str = "mig1", template: str = "tpl",
               model: str = "RESERVATION_BOUND"):
    """A workload policy, a template and a MIG; returns the MIG client."""
    policies = client(compute_v1.ResourcePoliciesClient, url)
    templates = client(compute_v1.InstanceTemplatesClient, url)
    migs = client(compute_v1.InstanceGroupManagersClient, url)
    try:
        policies.insert(project=P, region=REGION, resource_policy_resource=compute_v1.ResourcePolicy(
            name="wp", workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
                type_="HIGH_THROUGHPUT", accelerator_topology=topology))).result()
        templates.insert(project=P, instance_template_resource=compute_v1.InstanceTemplate(
            name=template, properties=compute_v1.InstanceProperties(
                machine_type="tpu7x-standard-4t", scheduling=compute_v1.Scheduling(
                    on_host_maintenance="TERMINATE", provisioning_model=model,
                    instance_termination_action="DELETE" if model != "STANDARD" else None)))).result()
    except exceptions.Conflict:
        pass
    migs.insert(project=P, zone=ZONE, instance_group_manager_resource=compute_v1.InstanceGroupManager(
        name=name, base_instance_name="slice", target_size=size,
        instance_template=f"projects/{P}/global/instanceTemplates/{template}",
        target_size_policy=compute_v1.InstanceGroupManagerTargetSizePolicy(mode=mode),
        resource_policies=compute_v1.InstanceGroupManagerResourcePolicies(
            workload_policy=policy_ref or f"projects/{P}/regions/{REGION}/resourcePolicies/wp")))
    return migs


def stable(migs, name: str = "mig1") -> compute_v1.InstanceGroupManager:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = migs.get(project=P, zone=ZONE, instance_group_manager=name)
        applied = got.status.applied_accelerator_topologies
        if got.status.is_stable and not (applied and applied[0].state == "ACTIVATING"):
            return got
        time.sleep(0.05)
    raise AssertionError("the MIG never became stable")


def test_a_bulk_mig_makes_one_slice_of_running_vms(server, http):
    migs = make_slice(server.url)
    got = stable(migs)
    assert not got.status.bulk_instance_operation.in_progress
    assert got.status.applied_accelerator_topologies[0].state == "ACTIVE"
    managed = list(migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager="mig1"))
    assert len(managed) == 2 and {m.instance_status for m in managed} == {"RUNNING"}
    assert all(m.name.startswith("slice-") and len(m.name) == len("slice-") + 4 for m in managed)
    instances = client(compute_v1.InstancesClient, server.url)
    ips = [instances.get(project=P, zone=ZONE, instance=m.name).network_interfaces[0].network_i_p
           for m in managed]
    assert len({ip.rsplit(".", 1)[0] for ip in ips}) == 1 and len(set(ips)) == 2  # one slice
    migs.delete(project=P, zone=ZONE, instance_group_manager="mig1")
    assert list(instances.list(project=P, zone=ZONE)) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "INDIVIDUAL"}, "MIGs with TPU accelerator topology require BULK mode in target size policy"),
    ({"size": 3}, "in the gang mode of size '2'. Should be equal to the gang size."),
    ({"policy_ref": "wp"}, "The URL is malformed."),
    # bulk-create-instances-in-mig: bulk mode takes reservation-bound or flex-start templates only.
    ({"model": "SPOT", "template": "spot"}, "either a reservation-bound or flex-start provisioning model"),
    ({"model": "STANDARD", "template": "std"}, "either a reservation-bound or flex-start provisioning model"),
])
def test_a_mig_google_refuses(server, kwargs, message):
    with pytest.raises(exceptions.BadRequest) as err:
        make_slice(server.url, **kwargs)
    assert err.value.message.endswith(message)


def test_resize_requests_are_refused(server):
    make_slice(server.url, size=0)
    requests = client(compute_v1.InstanceGroupManagerResizeRequestsClient, server.url)
    with pytest.raises(exceptions.BadRequest, match="Creating resize requests for managed "
                                                    "instance group with TPU is not allowed"):
        requests.insert(project=P, zone=ZONE, instance_group_manager="mig1",
                        instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
                            name="r1", resize_by=2))


def test_a_stocked_out_zone_keeps_the_mig_creating_with_its_error(server, http):
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "tpu7x-standard-4t"})
    migs = make_slice(server.url)
    deadline = time.monotonic() + 5
    while not list(migs.list_errors(project=P, zone=ZONE, instance_group_manager="mig1")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (error, *_) = migs.list_errors(project=P, zone=ZONE, instance_group_manager="mig1")
    assert error.error.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    got = migs.get(project=P, zone=ZONE, instance_group_manager="mig1")
    assert not got.status.is_stable and got.status.bulk_instance_operation.in_progress
    # The bulk operation's last progress check carries the error; no member's lastAttempt does.
    check = got.status.bulk_instance_operation.last_progress_check
    assert check.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED" and check.timestamp
    assert not any(m.last_attempt.errors.errors for m in migs.list_managed_instances(
        project=P, zone=ZONE, instance_group_manager="mig1"))
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "tpu7x-standard-4t", "clear": True})
    assert stable(migs).status.applied_accelerator_topologies[0].state == "ACTIVE"


def test_the_topology_is_activating_a_while_after_every_vm_runs(server, monkeypatch):
    from tpujob.emulator.apis.compute.tpu_mig_rules import UNSOURCED

    monkeypatch.setitem(UNSOURCED, "topology_activation", 1000.0)  # held ACTIVATING for this test
    server.emulator.world.set_faults(None, provisioning_delay=0.05)
    migs = make_slice(server.url)
    deadline = time.monotonic() + 10
    while not (got := migs.get(project=P, zone=ZONE, instance_group_manager="mig1")).status.is_stable:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert got.status.applied_accelerator_topologies[0].state == "ACTIVATING"
    assert {m.instance_status for m in migs.list_managed_instances(
        project=P, zone=ZONE, instance_group_manager="mig1")} == {"RUNNING"}


def flex_start_template(url: str, name: str = "flex") -> None:
    """A FLEX_START template: the one-VM body of a flex-start slice (maxRunDuration required)."""
    client(compute_v1.InstanceTemplatesClient, url).insert(
        project=P, instance_template_resource=compute_v1.InstanceTemplate(
            name=name, properties=compute_v1.InstanceProperties(
                machine_type="tpu7x-standard-4t", scheduling=compute_v1.Scheduling(
                    on_host_maintenance="TERMINATE", provisioning_model="FLEX_START",
                    instance_termination_action="DELETE",
                    max_run_duration=compute_v1.Duration(seconds=3600))))).result()


def managed(migs, name: str = "mig1") -> list:
    return list(migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager=name))


def test_a_flex_start_mig_is_made_at_size_0_then_resized_to_its_hosts(server):
    flex_start_template(server.url)
    migs = make_slice(server.url, size=0, template="flex")
    empty = migs.get(project=P, zone=ZONE, instance_group_manager="mig1")
    assert empty.target_size == 0 and empty.status.is_stable and managed(migs) == []
    operation = migs.resize(project=P, zone=ZONE, instance_group_manager="mig1", size=2)
    operation.result()
    assert operation.operation_type == "resize"
    got = stable(migs)
    assert got.target_size == 2 and got.status.applied_accelerator_topologies[0].state == "ACTIVE"
    members = managed(migs)
    assert {m.instance_status for m in members} == {"RUNNING"}
    migs.resize(project=P, zone=ZONE, instance_group_manager="mig1", size=2).result()  # no change
    assert [m.name for m in managed(migs)] == [m.name for m in members]


@pytest.mark.parametrize("start, size, message", [
    (2, 4, "A managed instance group in bulk mode can grow only from target size 0"),
    (0, 3, "in the gang mode of size '2'. Should be equal to the gang size."),
])
def test_a_resize_google_refuses(server, start, size, message):
    flex_start_template(server.url)
    migs = make_slice(server.url, size=start, template="flex")
    with pytest.raises(exceptions.BadRequest) as err:
        migs.resize(project=P, zone=ZONE, instance_group_manager="mig1", size=size)
    assert message in err.value.message
    assert migs.get(project=P, zone=ZONE, instance_group_manager="mig1").target_size == start


def test_a_flex_start_mig_waits_pending_through_a_stockout_then_comes_up(server, http):
    http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "tpu7x-standard-4t"})
    try:
        flex_start_template(server.url)
        migs = make_slice(server.url, size=0, template="flex")
        migs.resize(project=P, zone=ZONE, instance_group_manager="mig1", size=2).result()
        time.sleep(0.5)  # several of the emulator's tries
        members = managed(migs)
        assert len(members) == 2 and {m.instance_status for m in members} == {"PENDING"}
        assert {m.current_action for m in members} == {"CREATING"}
        got = migs.get(project=P, zone=ZONE, instance_group_manager="mig1")
        assert not got.status.is_stable and got.status.bulk_instance_operation.in_progress
        assert list(migs.list_errors(project=P, zone=ZONE, instance_group_manager="mig1")) == []
    finally:
        http("POST", "/emulator/v1/stockout", {"zone": ZONE, "machineType": "tpu7x-standard-4t", "clear": True})
    assert stable(migs).status.applied_accelerator_topologies[0].state == "ACTIVE"
    assert {m.instance_status for m in managed(migs)} == {"RUNNING"}
    assert sorted(m.name for m in managed(migs)) == sorted(m.name for m in members)  # the same VMs


@pytest.mark.slow
def test_stopping_one_vm_kills_its_host_only(tmp_path):
    # A BULK MIG's VMs are reservation-bound or flex-start, not preemptible: one is lost by a stop.
    from tpujob.emulator.machines.slice import SliceMachines

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=SliceMachines, preempt_grace=0.2) as srv:
        migs = make_slice(srv.url)
        stable(migs)
        names = [m.name for m in migs.list_managed_instances(project=P, zone=ZONE,
                                                             instance_group_manager="mig1")]
        refs = [f"projects/{P}/zones/{ZONE}/instances/{n}" for n in names]
        assert all(len(srv.emulator.host_faults.hosts(r)) == 1 for r in refs)
        srv.emulator.vms.stop(P, ZONE, names[0])
        assert srv.emulator.host_faults.hosts(refs[0]) == [] and len(srv.emulator.host_faults.hosts(refs[1])) == 1
        got = migs.get(project=P, zone=ZONE, instance_group_manager="mig1")
        assert got.status.applied_accelerator_topologies[0].state == "INCOMPLETE"


class RecordingMachines:
    """A machines factory that records what each slice was started with; hosts with a host key."""

    made: list[dict] = []

    def __init__(self, **kwargs):
        RecordingMachines.made.append(kwargs)
        self.kwargs = kwargs

    def start(self):
        from tpujob.emulator.addresses import VirtualHost, host_ip

        return [VirtualHost(i, host_ip(self.kwargs["ip_block"], i), self.kwargs["ssh_port"],
                            host_key=f"ssh-ed25519 KEY{i}") for i in range(self.kwargs["num_hosts"])]

    def stop(self):
        pass

    def kill_host(self, index):
        pass


def test_the_templates_ssh_keys_reach_every_host_and_each_vm_publishes_its_host_key(tmp_path):
    RecordingMachines.made = []
    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=RecordingMachines) as srv:
        templates = client(compute_v1.InstanceTemplatesClient, srv.url)
        templates.insert(project=P, instance_template_resource=compute_v1.InstanceTemplate(
            name="tpl", properties=compute_v1.InstanceProperties(
                machine_type="tpu7x-standard-4t",
                metadata=compute_v1.Metadata(items=[compute_v1.Items(
                    key="ssh-keys", value="alice:ssh-ed25519 AAAA a\nbob:ssh-ed25519 BBBB b"),
                    compute_v1.Items(key="enable-guest-attributes", value="TRUE")]),
                scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE",
                                                 provisioning_model="RESERVATION_BOUND",
                                                 instance_termination_action="DELETE")))).result()
        migs = make_slice(srv.url)
        stable(migs)
        [made] = RecordingMachines.made
        assert made["num_hosts"] == 2
        assert made["authorized_keys"] == ["alice:ssh-ed25519 AAAA a", "bob:ssh-ed25519 BBBB b"]
        assert made["login"] is not None  # OS Login is asked at each login, as for a lone VM
        instances = client(compute_v1.InstancesClient, srv.url)
        names = sorted(m.name for m in migs.list_managed_instances(
            project=P, zone=ZONE, instance_group_manager="mig1"))
        keys = [[i.value for i in instances.get_guest_attributes(
            compute_v1.GetGuestAttributesInstanceRequest(
                project=P, zone=ZONE, instance=n, query_path="hostkeys/")).query_value.items]
            for n in names]
        assert sorted(keys) == [["KEY0"], ["KEY1"]]
        metadata = instances.get(project=P, zone=ZONE, instance=names[0]).metadata.items
        assert [(i.key, i.value) for i in metadata][:2] == [
            ("ssh-keys", "alice:ssh-ed25519 AAAA a\nbob:ssh-ed25519 BBBB b"), ("enable-guest-attributes", "TRUE")]
        # Each VM says its TPU worker id in tpu-env; worker 0 is not the first by name here.
        workers = {n: next(i.value for i in instances.get(project=P, zone=ZONE, instance=n).metadata.items
                           if i.key == "tpu-env").split("WORKER_ID: '")[1][0] for n in names}
        assert sorted(workers.values()) == ["0", "1"] and workers[names[0]] == "1"


def disk_template(url: str, name: str, disk: str, mode: str = "READ_ONLY") -> None:
    """A template whose VMs attach the zone's disk `disk` (named, as a template names it)."""
    client(compute_v1.InstanceTemplatesClient, url).insert(
        project=P, instance_template_resource=compute_v1.InstanceTemplate(
            name=name, properties=compute_v1.InstanceProperties(
                machine_type="tpu7x-standard-4t", disks=[
                    compute_v1.AttachedDisk(boot=True, auto_delete=True),
                    compute_v1.AttachedDisk(source=disk, mode=mode, auto_delete=False)],
                scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE",
                                                 provisioning_model="RESERVATION_BOUND",
                                                 instance_termination_action="DELETE")))).result()


def test_every_vm_of_a_mig_attaches_its_templates_disk_once_the_zone_has_it(server):
    disks = client(compute_v1.DisksClient, server.url)
    disk_template(server.url, "ro", "data")
    migs = make_slice(server.url, name="withdisk", template="ro")
    deadline = time.monotonic() + 5  # no such disk yet: each try fails with Compute's words
    while not list(migs.list_errors(project=P, zone=ZONE, instance_group_manager="withdisk")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (error, *_) = migs.list_errors(project=P, zone=ZONE, instance_group_manager="withdisk")
    assert error.error.message == (f"Invalid value for field 'resource.disks[1].source': "
                                   f"'projects/{P}/zones/{ZONE}/disks/data'. The referenced disk "
                                   "resource cannot be found.")
    assert not migs.get(project=P, zone=ZONE, instance_group_manager="withdisk").status.is_stable

    disks.insert(project=P, zone=ZONE, disk_resource=compute_v1.Disk(
        name="data", size_gb=10, type_=f"zones/{ZONE}/diskTypes/hyperdisk-balanced")).result()
    stable(migs, "withdisk")
    names = sorted(m.name for m in managed(migs, "withdisk"))
    instances = client(compute_v1.InstancesClient, server.url)
    for name in names:
        (disk,) = [d for d in instances.get(project=P, zone=ZONE, instance=name).disks if not d.boot]
        assert disk.source.endswith(f"/projects/{P}/zones/{ZONE}/disks/data") and disk.mode == "READ_ONLY"
    assert sorted(disks.get(project=P, zone=ZONE, disk="data").users) == names
    migs.delete(project=P, zone=ZONE, instance_group_manager="withdisk")
    assert list(disks.get(project=P, zone=ZONE, disk="data").users) == []


def test_a_templates_read_write_disk_is_refused_to_the_second_vm(server):
    client(compute_v1.DisksClient, server.url).insert(project=P, zone=ZONE, disk_resource=compute_v1.Disk(
        name="rw", size_gb=10, type_=f"zones/{ZONE}/diskTypes/hyperdisk-balanced")).result()
    disk_template(server.url, "rwt", "rw", mode="READ_WRITE")
    migs = make_slice(server.url, name="rwmig", template="rwt")
    deadline = time.monotonic() + 5
    while not list(migs.list_errors(project=P, zone=ZONE, instance_group_manager="rwmig")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (error, *_) = migs.list_errors(project=P, zone=ZONE, instance_group_manager="rwmig")
    assert "is already being used by 'slice-" in error.error.message and "in READ_WRITE mode" in error.error.message
    assert list(client(compute_v1.DisksClient, server.url).get(project=P, zone=ZONE, disk="rw").users) == []
