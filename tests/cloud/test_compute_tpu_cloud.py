"""The slice port over Compute Engine (ComputeTpuCloud) against the emulator: the instance it
asks for, its phases from insert to preemption, and the errors a user sees, typed as the
reconcile decides on them."""

from __future__ import annotations

import pytest
from test_compute_mig_slices import until

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import ReservationUnavailable, StockoutError, UsageError

PROJECT, ZONE = "tpujob-test", "us-east5-a"  # us-east5-a offers v6e and v5p (emulator/apis/compute/tpu_vm_rules.py)


@pytest.fixture
def compute(server):
    from tpujob.cloud.compute_tpu import ComputeTpuCloud

    return ComputeTpuCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01,
                                        labels={"tpujob-store": "s1"})


def request(name: str, accelerator: str = "v6e-8", **fields) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator, api="compute",
                        runtime_version="", labels={"tpujob-job": "000001"}, ssh_keys=("tpujob:ssh-ed25519 AAAA k",),
                        **fields)


def instance(server, name: str) -> dict:
    from tpujob.emulator.apis.errors import ApiError

    try:
        return server.emulator.vms.get(PROJECT, ZONE, name)
    except ApiError:
        return {}


def test_a_spot_v6e_8_is_one_instance_with_its_machine_type_image_and_scheduling(compute, server):
    made = compute.create_node(request("vm1", provisioning="spot"))
    assert (made.phase, made.node_state, made.accelerator_type) == (SlicePhase.READY, "RUNNING", "ct6e-standard-8t")
    body = instance(server, "vm1")
    assert body["machineType"].endswith("/zones/us-east5-a/machineTypes/ct6e-standard-8t")
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["labels"] == {"tpujob-store": "s1", "tpujob-job": "000001"}
    keys = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert keys["ssh-keys"] == "tpujob:ssh-ed25519 AAAA k"
    assert [h.index for h in made.hosts] == [0] and made.hosts[0].ip
    listed = compute.list_slices(PROJECT, ZONE)
    assert list(listed) == ["vm1"] and listed["vm1"].phase is SlicePhase.READY
    assert compute.host_keys(PROJECT, ZONE, "vm1") == {0: []}  # no host machines: no key


@pytest.mark.parametrize("asked, size", [(None, "100"), (250, "250")])
def test_the_boot_disk_is_tpujobs_size_not_the_images(compute, server, asked, size):
    # A boot disk given no diskSizeGb is the image's size (AttachedDiskInitializeParams), small
    # for JAX: tpujob asks for tpu.boot_disk_gb, else 100 GB as a TPU API VM has.
    compute.create_node(request(f"disk{asked or 0}", provisioning="spot", boot_disk_gb=asked))
    [boot] = [d for d in instance(server, f"disk{asked or 0}")["disks"] if d.get("boot")]
    assert boot["diskSizeGb"] == size


def test_a_vms_upcoming_maintenance_is_read_as_the_slices_window(compute, server):
    # Instance.resourceStatus.upcomingMaintenance (google-cloud-compute): the window decide acts on
    # early (a checkpoint, a new slice), as on the TPU API path.
    import time

    compute.create_node(request("vm10", provisioning="spot"))
    server.emulator.host_faults.announce_maintenance(f"projects/{PROJECT}/zones/{ZONE}/instances/vm10", 600)
    seen = compute.get_slice(PROJECT, ZONE, "vm10")
    assert seen.phase is SlicePhase.READY and seen.maintenance is not None
    assert (seen.maintenance.type, seen.maintenance.status) == ("SCHEDULED", "PENDING")
    assert 500 < seen.maintenance.start - time.time() <= 600
    assert compute.list_slices(PROJECT, ZONE)["vm10"].maintenance == seen.maintenance


def test_a_preempted_spot_vm_reads_preempted_then_gone_once_deleted(compute, server):
    compute.create_node(request("vm2", provisioning="spot"))
    server.emulator.host_faults.preempt(f"projects/{PROJECT}/zones/{ZONE}/instances/vm2", 0)
    seen = compute.get_slice(PROJECT, ZONE, "vm2")
    assert (seen.phase, seen.node_state) == (SlicePhase.PREEMPTED, "TERMINATED")
    compute.delete_slice(PROJECT, ZONE, "vm2")
    assert compute.get_slice(PROJECT, ZONE, "vm2").phase is SlicePhase.GONE
    compute.delete_slice(PROJECT, ZONE, "vm2")  # a missing instance's delete succeeds


@pytest.mark.parametrize("provisioning", ["spot", "on-demand"])
def test_a_vm_stopped_without_a_preemption_is_lost_not_preempted(compute, server, provisioning):
    # Only a VM with a compute.instances.preempted operation was preempted (Google's
    # preemptible-VM page; peers filter on it): a stopped one is FAILED, saying why.
    compute.create_node(request("vm8", provisioning=provisioning))
    server.emulator.vms.stop(PROJECT, ZONE, "vm8")
    seen = compute.get_slice(PROJECT, ZONE, "vm8")
    assert (seen.phase, seen.node_state) == (SlicePhase.FAILED, "TERMINATED")
    assert "not preempted" in seen.detail
    assert compute.list_slices(PROJECT, ZONE)["vm8"].phase is SlicePhase.FAILED


def test_a_vm_in_its_shutdown_reads_stopping_and_keeps_no_hosts(compute, server):
    """The notice's grace (the emulator's PREEMPTING_STATUS): STOPPING, not yet PREEMPTED, so
    that no sweep deletes it while its program writes its SIGTERM checkpoint."""
    from tpujob.emulator.apis.compute.tpu_vms import PREEMPTING_STATUS

    compute.create_node(request("vm4", provisioning="spot"))
    vm = server.emulator.vms.find(f"projects/{PROJECT}/zones/{ZONE}/instances/vm4")
    vm.body["status"] = PREEMPTING_STATUS
    seen = compute.list_slices(PROJECT, ZONE)["vm4"]
    assert (seen.phase, seen.node_state, seen.hosts) == (SlicePhase.STOPPING, "STOPPING", ())
    compute.delete_slice(PROJECT, ZONE, "vm4")


def test_a_stockout_is_a_stockout_error_with_googles_words(compute, server):
    server.emulator.world.stockout(ZONE, "ct6e-standard-8t", False)
    try:
        with pytest.raises(StockoutError, match="does not have enough resources available"):
            compute.create_node(request("vm3"))
    finally:
        server.emulator.world.stockout(ZONE, "ct6e-standard-8t", clear=True)
    assert compute.get_slice(PROJECT, ZONE, "vm3").phase is SlicePhase.GONE


def test_a_reservation_that_does_not_exist_ends_the_create_with_its_message(compute):
    with pytest.raises(ReservationUnavailable, match="Specified reservation 'missing' does not exist"):
        compute.create_node(request("vm4", provisioning="reservation", reservation="missing"))


def test_a_reservation_that_exists_is_consumed_by_name(compute, server):
    server.emulator.vms.reserve(PROJECT, ZONE, "res1", "ct6e-standard-8t", 1)
    made = compute.create_node(request("vm5", provisioning="reservation", reservation="res1"))
    assert made.phase is SlicePhase.READY
    body = instance(server, "vm5")
    assert body["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    assert body["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                           "key": "compute.googleapis.com/reservation-name", "values": ["res1"]}


def test_flex_start_waits_queued_then_runs(compute, server):
    server.emulator.world.set_faults(None, provisioning_delay=0.3)
    operation = compute.request_node(request("vm6", provisioning="flex-start", max_run_duration_seconds=3600))
    assert compute.get_slice(PROJECT, ZONE, "vm6").phase is SlicePhase.QUEUED
    assert instance(server, "vm6")["scheduling"]["maxRunDuration"] == {"seconds": "3600"}
    import time

    deadline = time.monotonic() + 10
    while not compute.operation_done(operation, "creating vm6", create=True):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert compute.get_slice(PROJECT, ZONE, "vm6").phase is SlicePhase.READY


def test_a_flex_start_vm_asks_to_wait_so_a_stockout_keeps_it_queued(compute, server):
    # Without params.requestValidForDuration Google fails the insert in a stockout (InstanceParams;
    # about-flex-start-vms): tpujob asks for the spec's queue timeout, held to 90 s .. 2 h.
    server.emulator.world.stockout(ZONE, "ct6e-standard-8t", False)
    operation = compute.request_node(request("vm7", provisioning="flex-start", max_run_duration_seconds=3600,
                                             valid_until_seconds=6 * 3600))
    assert not compute.operation_done(operation, "creating vm7", create=True)
    assert compute.get_slice(PROJECT, ZONE, "vm7").phase is SlicePhase.QUEUED
    server.emulator.world.stockout(ZONE, "ct6e-standard-8t", True)
    until(compute, "vm7", SlicePhase.READY)
    assert compute.operation_done(operation, "creating vm7", create=True)


@pytest.mark.parametrize("provisioning", ["spot", "on-demand"])
def test_max_run_duration_ends_a_vm_of_any_provisioning(compute, server, provisioning):
    # limit-vm-runtime: any VM with maxRunDuration is stopped or deleted when it reaches it.
    compute.create_node(request("vm9", provisioning=provisioning, max_run_duration_seconds=1))
    assert instance(server, "vm9")["scheduling"]["maxRunDuration"] == {"seconds": "1"}
    ended = until(compute, "vm9", SlicePhase.FAILED)  # stopped at its limit: no preemption
    assert ended.node_state == "TERMINATED"


class BrokenMachines:
    """Hosts that never come up: the insert fails after STAGING."""

    def __init__(self, **kwargs):
        pass

    def start(self):
        raise RuntimeError("the host did not boot")

    def stop(self):
        pass


def test_an_internal_error_after_staging_is_a_capacity_miss_not_a_retry(tmp_path):
    # A 503 INTERNAL_ERROR ending the insert (dstack#488, ray#6790: users read it as no capacity):
    # InternalCreateError, which decide spends as a capacity miss, never the same call again.
    from tpujob.cloud.compute_tpu import ComputeTpuCloud
    from tpujob.emulator.server import EmulatorServer
    from tpujob.errors import InternalCreateError

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=BrokenMachines) as srv:
        compute = ComputeTpuCloud.for_emulator(srv.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
        with pytest.raises(InternalCreateError, match="INTERNAL_ERROR|the host did not boot"):
            compute.create_node(request("broken", provisioning="spot"))


def test_multislice_and_queued_resources_are_refused_before_any_call(compute):
    calls = compute.api_calls
    with pytest.raises(UsageError, match="multislice is not offered on the Compute Engine path"):
        compute.request_node(request("vm7", accelerator="v6e-16", slices=2))
    with pytest.raises(UsageError, match="queued resources belong to the Cloud TPU API"):
        compute.create_queued_resource(request("vm8"))
    assert compute.api_calls == calls


def test_the_router_sends_each_api_its_own_calls(server):
    from tpujob.cloud.apis import TpuApis
    from tpujob.cloud.compute_tpu import ComputeTpuCloud
    from tpujob.cloud.tpu_api import GcpCloud

    made = []
    apis = TpuApis(lambda: made.append("tpu-vm") or GcpCloud.for_emulator(server.url),
                   lambda: made.append("compute") or ComputeTpuCloud.for_emulator(server.url))
    assert apis.api_calls == 0 and made == []   # nothing built until a call needs it
    assert isinstance(apis.for_api("tpu-vm"), GcpCloud) and apis.for_api("tpu-vm") is apis.tpu_vm
    assert made == ["tpu-vm"]   # compute never built for a TPU-API store
    assert isinstance(apis.for_api("compute"), ComputeTpuCloud) and apis.for_api("compute") is apis.for_api("compute")
    assert made == ["tpu-vm", "compute"]
    assert apis.list_slices(PROJECT, "us-central2-b") == {}   # the rest is the TPU API's


class KeyedMachines:
    """Hosts with host keys and nothing else: what getGuestAttributes publishes once enabled."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def start(self):
        from tpujob.emulator.addresses import VirtualHost, host_ip

        return [VirtualHost(i, host_ip(self.kwargs["ip_block"], i), self.kwargs["ssh_port"],
                            host_key=f"ssh-ed25519 KEY{i}") for i in range(self.kwargs["num_hosts"])]

    def stop(self):
        pass

    def kill_host(self, index):
        pass


@pytest.mark.parametrize("accelerator, keys", [("v6e-8", [["ssh-ed25519 KEY0"]]),
                                               ("v6e-16", [[f"ssh-ed25519 KEY{i}"] for i in range(4)])])
def test_every_vm_enables_guest_attributes_so_its_host_keys_can_be_read(tmp_path, accelerator, keys):
    # Guest attributes are off unless the metadata enables them (Google's manage-guest-attributes
    # page): without `enable-guest-attributes: TRUE`, strict host keys would wait for ever.
    from tpujob.cloud.compute_tpu import ComputeTpuCloud
    from tpujob.emulator.server import EmulatorServer

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=KeyedMachines) as srv:
        compute = ComputeTpuCloud.for_emulator(srv.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
        compute.create_node(request("keyed", accelerator, provisioning="flex-start", max_run_duration_seconds=3600))
        until(compute, "keyed", SlicePhase.READY)
        assert sorted(compute.host_keys(PROJECT, ZONE, "keyed").values()) == keys
