"""The Cloud protocol over Compute Engine (google-cloud-compute, REST): a TPU VM is an instance
with a TPU machine type. Google's path for TPU7x and later, and for flex-start and reservations
(docs/compute-engine.md has every fact with its source).

A single-host slice is one instance named NAME: its body, insert, reading and delete are here,
with what both slice shapes share (clients, operations, retries). A slice of several hosts (a
workload policy, an instance template and a BULK MIG, all named NAME) is
tpujob.cloud.compute_migs; an instance's fields as tpujob reads them,
tpujob.cloud.compute_instances. Import lazily: compute_v1 costs seconds to import.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Sequence

from google.cloud import compute_v1

from tpujob import catalogue
from tpujob.cloud.api_calls import emulator_settings, invoke, new_retry
from tpujob.cloud.base import Slice, SliceRequest, TpuResource
from tpujob.cloud.compute import COMPUTE, operation_failure, rfc3339
from tpujob.cloud.compute_instances import (
    PREEMPTED_OPERATION,
    STOPPED_STATUSES,
    read_data_disks,
    read_hosts,
    read_metadata,
    read_slice,
    shorten,
)
from tpujob.cloud.compute_migs import MigSlices
from tpujob.compute_shapes import BOOT_DISK_GB, compute_shape
from tpujob.errors import CloudError, ConfigError, NotFoundError, UsageError

# Compute Engine's TPU machine types (cloud.google.com/compute/docs/tpus/tpu-machines): what
# tells a TPU VM from the project's other instances in a listing.
TPU_MACHINE_PREFIXES = ("ct5p-", "ct6e-", "tpu7x-")
# provisioning (the spec's) -> scheduling.provisioningModel (compute.v1 discovery, Scheduling).
PROVISIONING_MODELS = {"spot": "SPOT", "on-demand": "STANDARD", "flex-start": "FLEX_START",
                       "reservation": "RESERVATION_BOUND"}
RESERVATION_KEY = "compute.googleapis.com/reservation-name"  # ReservationAffinity.key
# `instances create` gives no cloud-platform scope unless asked (facts: xbill9/gemma4-dev
# HARDWARE.md); a TPU-API VM had it, and the runtime reads and writes Cloud Storage.
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# tpujob reads each VM's SSH host keys from its `hostkeys/` guest attributes (host_keys), which
# are off unless the metadata sets `enable-guest-attributes: TRUE` (cloud.google.com/compute/docs/
# metadata/manage-guest-attributes; related-sciences/gce-github-runner#27, a user report, waited
# on them in vain): on every VM and template, so `ssh_host_keys: strict` has keys to pin.
GUEST_ATTRIBUTES = {"enable-guest-attributes": "TRUE"}
# A lone flex-start VM waits in Google's queue (PENDING) only when its insert sets
# params.requestValidForDuration ("Relative deadline for waiting for capacity. Relevant only for
# Instances.Insert API": google-cloud-compute InstanceParams); without it a stocked-out zone fails
# the insert at once ("VMs only start if resources become available within your specified
# timeframe", cloud.google.com/compute/docs/instances/about-flex-start-vms). Google takes "a
# period between 90 seconds and 2 hours" (cloud.google.com/blog/products/compute/introducing-
# flex-start-vms-for-the-compute-engine-instance-api): the spec's queue timeout, held to that.
FLEX_WAIT_MIN, FLEX_WAIT_MAX = 90, 2 * 3600


def subnetwork_ref(given: str | None, zone: str) -> str | None:
    """NetworkInterface.subnetwork as "a full or partial URL" (google-cloud-compute:
    `regions/REGION/subnetworks/NAME`): a bare name becomes the zone's region's, which a global
    instance template cannot find itself (ansible/ansible#28930, a peer: "Could not determine
    region for subnetwork")."""
    if not given:
        return None
    return given if "/" in given else f"regions/{zone.rsplit('-', 1)[0]}/subnetworks/{given}"


def flex_wait(seconds: int | None) -> int:
    """params.requestValidForDuration for a flex-start insert: `seconds` (the spec's queue
    timeout) held to Google's window; the longest when none is given."""
    return min(max(seconds or FLEX_WAIT_MAX, FLEX_WAIT_MIN), FLEX_WAIT_MAX)


class ComputeTpuCloud(MigSlices):
    """TPU VMs as Compute Engine instances; a multi-host slice through MigSlices.
    `api_calls` counts every request sent."""

    def __init__(self, endpoint: str | None = None, credentials: Any = None,
                 retry_initial: float = 1.0, retry_maximum: float = 30.0,
                 retry_deadline: float = 300.0, poll_interval: float = 2.0,
                 labels: dict[str, str] | None = None):
        options = {"api_endpoint": endpoint} if endpoint else None
        kwargs = dict(transport="rest", credentials=credentials, client_options=options)
        self._instances = compute_v1.InstancesClient(**kwargs)
        self._zone_ops = compute_v1.ZoneOperationsClient(**kwargs)
        self._policies = compute_v1.ResourcePoliciesClient(**kwargs)
        self._templates = compute_v1.InstanceTemplatesClient(**kwargs)
        self._migs = compute_v1.InstanceGroupManagersClient(**kwargs)
        self._region_ops = compute_v1.RegionOperationsClient(**kwargs)
        self._global_ops = compute_v1.GlobalOperationsClient(**kwargs)
        self._retry = new_retry(retry_initial, retry_maximum, retry_deadline)
        self.poll_interval = poll_interval
        self.labels = dict(labels or {})  # on every instance created (the store's id)
        self.api_calls = 0
        self._count_lock = threading.Lock()

    @classmethod
    def for_emulator(cls, endpoint: str, **kwargs: Any) -> ComputeTpuCloud:
        return cls(endpoint=endpoint, **emulator_settings(**kwargs))

    def for_api(self, api: catalogue.Api) -> ComputeTpuCloud:
        if api != catalogue.COMPUTE:  # not compute.googleapis.com (cloud/compute.COMPUTE)
            raise ConfigError(f"a job on the {api!r} API needs tpujob.cloud.apis.TpuApis, not Compute Engine alone")
        return self

    # ---- create -----------------------------------------------------------------------------

    def create_node(self, request: SliceRequest, timeout: float = 1800.0) -> Slice:
        """Create the instance and wait for its insert (RUNNING, PENDING for flex-start, or a
        typed error: StockoutError on ZONE_RESOURCE_POOL_EXHAUSTED)."""
        operation = self.request_node(request)
        deadline = time.monotonic() + timeout
        while not self.operation_done(operation, f"creating instance {request.name}", create=True):
            if time.monotonic() > deadline:
                raise CloudError(f"creating instance {request.name}: not done after {timeout:g} s")
            time.sleep(self.poll_interval)
        return self.get_slice(request.project, request.zone, request.name)

    def request_node(self, request: SliceRequest) -> str:
        """Insert the instance (a multi-host slice: its policy and template, waited for, then
        its MIG); the last insert's zone operation's path, not waited for. A multi-host
        flex-start slice's MIG is inserted at size 0 and resized (MigSlices._request_mig): the
        resize's zone operation."""
        instance = self._instance(request)
        if compute_shape(request.accelerator_type).hosts > 1:
            return self._request_mig(request)
        op = self._call(f"creating instance {request.name}", self._instances.insert,
                        project=request.project, zone=request.zone, instance_resource=instance)
        return f"projects/{request.project}/zones/{request.zone}/operations/{op.name}"

    def operation_done(self, name: str, what: str, create: bool = False) -> bool:
        """Whether the operation (`projects/P/zones/Z/operations/N`; a workload policy's
        `projects/P/regions/R/...`, a template's `projects/P/global/...`) has ended well; one
        that ended with an error raises it, typed."""
        parts = name.split("/")
        project, scope, op_name = parts[1], parts[2], parts[-1]
        if scope == "zones":
            op = self._call(what, self._zone_ops.get, project=project, zone=parts[3], operation=op_name)
        elif scope == "regions":
            op = self._call(what, self._region_ops.get, project=project, region=parts[3], operation=op_name)
        else:
            op = self._call(what, self._global_ops.get, project=project, operation=op_name)
        if op.status != compute_v1.Operation.Status.DONE:
            return False
        failure = operation_failure(op, what, create=create)
        if failure is not None:
            raise failure
        return True

    def create_queued_resource(self, request: SliceRequest, timeout: float = 300.0) -> Slice:
        raise UsageError("queued resources belong to the Cloud TPU API: on the Compute Engine path "
                         "set tpu.queued: false (flex-start waits for capacity instead)")

    def _instance(self, request: SliceRequest) -> compute_v1.Instance:
        shape = compute_shape(request.accelerator_type)
        if request.slices != 1:
            raise UsageError(f"{request.slices} slices of {request.accelerator_type}: multislice is not "
                             "offered on the Compute Engine path (tpu.api: compute); use one slice")
        model = PROVISIONING_MODELS.get(request.provisioning)
        if model is None:
            raise UsageError(f"provisioning {request.provisioning!r} is not offered on the Compute Engine "
                             f"path: use {', '.join(PROVISIONING_MODELS)}")
        zone = request.zone
        metadata = {**request.metadata, **GUEST_ATTRIBUTES}
        if request.ssh_keys:
            metadata["ssh-keys"] = "\n".join(filter(None, [metadata.get("ssh-keys"), *request.ssh_keys]))
        # TPU VMs cannot live-migrate: onHostMaintenance TERMINATE (facts: Google's create
        # command). automaticRestart: false for Spot (a preempted Spot VM is not restarted:
        # facts, spot-compute) and, tpujob's choice, for flex-start, whose restart no source
        # pins to this field (failure-recovery says Google restarts failed flex-start VMs):
        # tpujob makes a new slice instead (docs/compute-engine.md, choices).
        scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE", provisioning_model=model,
                                           automatic_restart=model in ("STANDARD", "RESERVATION_BOUND"))
        if model == "SPOT":
            scheduling.instance_termination_action = "STOP"  # a preempted VM stays, TERMINATED
        if model == "FLEX_START":
            scheduling.instance_termination_action = "DELETE"
        # tpu.max_run_duration on any provisioning model: Compute Engine ends any VM at its
        # maxRunDuration, "automatically terminated (stopped or deleted)" by its
        # instanceTerminationAction (cloud.google.com/compute/docs/instances/limit-vm-runtime);
        # flex-start requires it (spec/compute_engine.py), the others take it when asked.
        if request.max_run_duration_seconds:
            scheduling.max_run_duration = compute_v1.Duration(seconds=request.max_run_duration_seconds)
        instance = compute_v1.Instance(
            name=request.name, machine_type=f"zones/{zone}/machineTypes/{shape.machine_type}",
            labels={**self.labels, **request.labels},
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=f"projects/{shape.image_project}/global/images/family/{shape.image_family}",
                    disk_type=f"zones/{zone}/diskTypes/{shape.boot_disk_type}",
                    # tpu.boot_disk_gb, else tpujob's default (compute_shapes.BOOT_DISK_GB): the
                    # image's own size is small for JAX and a user's packages.
                    disk_size_gb=request.boot_disk_gb or BOOT_DISK_GB))]
            + [compute_v1.AttachedDisk(source=d.source, mode="READ_ONLY" if d.read_only else "READ_WRITE")
               for d in request.data_disks],
            network_interfaces=[compute_v1.NetworkInterface(
                network=request.network or "global/networks/default",
                subnetwork=subnetwork_ref(request.subnetwork, zone),
                access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
                if request.external_ips else [])],
            tags=compute_v1.Tags(items=list(request.tags)),
            scheduling=scheduling,
            service_accounts=[compute_v1.ServiceAccount(email="default", scopes=list(SCOPES))])
        if model == "FLEX_START" and shape.hosts == 1:  # a MIG's VMs wait through its resize
            instance.params = compute_v1.InstanceParams(
                request_valid_for_duration=compute_v1.Duration(seconds=flex_wait(request.valid_until_seconds)))
        if model == "RESERVATION_BOUND":
            instance.reservation_affinity = compute_v1.ReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY,
                values=[request.reservation or ""])
        return instance

    def add_ssh_keys(self, project: str, zone: str, nodes: Sequence[str], lines: Sequence[str],
                     timeout: float = 300.0) -> list[str]:
        """Add `lines` ("USER:ssh-ed25519 AAAA... comment") to the instance-level `ssh-keys`
        metadata of every VM of each slice in `nodes` (a lone VM NAME, else the VMs of the MIG
        NAME), as Google's "Add SSH keys to VMs" page does for one VM
        (cloud.google.com/compute/docs/connect/add-ssh-keys): instances.setMetadata replaces
        the whole item list, so every other item goes back as read, with the fingerprint read
        with it (Metadata.fingerprint, google-cloud-compute: "You must always provide an
        up-to-date fingerprint hash ... otherwise the request will fail with error 412
        conditionNotMet"); a VM changed in between is read again and written once more.

        On a MIG's VMs this changes the instances, not the template: the template already
        carries every line the lab had when the slice was made. Google does not promise that
        the line stays: a VM changed through the instances API rather than the group's, "at
        any time in the future, the MIG might automatically attempt to recreate or revert
        that VM according to the MIG's configuration" (cloud.google.com/compute/docs/
        instance-groups/working-with-managed-instances), and a repair recreates a VM "using
        the same instance configuration that was originally used to create the VM"
        (.../instance-groups/update-on-repair). Whether a stable TPU VM is ever reverted is
        unverified; a VM that lost the line lacks it until this node adds it again. Returns the VMs changed."""
        changed = []
        for name in nodes:
            for vm in self._slice_vms(project, zone, name):
                if self._add_vm_keys(project, zone, vm, lines, timeout):
                    changed.append(vm)
        return changed

    def _slice_vms(self, project: str, zone: str, name: str) -> list[str]:
        """The instance NAME; else the VMs of the MIG NAME (NotFoundError: neither)."""
        try:
            self._call(f"getting instance {name}", self._instances.get, project=project, zone=zone, instance=name)
        except NotFoundError:
            return [m.name for m in self._managed(project, zone, name)]
        return [name]

    def _add_vm_keys(self, project: str, zone: str, vm: str, lines: Sequence[str], timeout: float) -> bool:
        """One VM's read-modify-write of `ssh-keys`; whether it was written."""
        from google.api_core import exceptions as gexc

        what = f"adding SSH keys to instance {vm}"
        for _ in range(2):  # a stale fingerprint (another writer in between): read again, once
            instance = self._call(f"getting instance {vm}", self._instances.get,
                                  project=project, zone=zone, instance=vm)
            items = {item.key: item.value for item in instance.metadata.items}
            have = [line for line in items.get("ssh-keys", "").splitlines() if line.strip()]
            missing = [line for line in lines if line not in have]
            if not missing:
                return False
            items["ssh-keys"] = "\n".join([*have, *missing])
            body = compute_v1.Metadata(fingerprint=instance.metadata.fingerprint,
                                       items=[compute_v1.Items(key=k, value=v) for k, v in items.items()])

            def write(body: compute_v1.Metadata = body) -> Any:
                try:
                    return self._instances.set_metadata(project=project, zone=zone, instance=vm,
                                                        metadata_resource=body)
                except gexc.PreconditionFailed:
                    return None  # 412 conditionNotMet: the fingerprint is stale

            op = self._call(what, write)
            if op is not None:
                self._wait(f"projects/{project}/zones/{zone}/operations/{op.name}", what, timeout=timeout)
                return True
        raise CloudError(f"{what}: its metadata changed twice while it was being written (412 conditionNotMet); "
                         "the next sweep tries again")

    # ---- wait -------------------------------------------------------------------------------

    def _wait(self, operation: str, what: str, create: bool = False, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.operation_done(operation, what, create=create):
            if time.monotonic() > deadline:
                raise CloudError(f"{what}: not done after {timeout:g} s")
            time.sleep(self.poll_interval)

    # ---- read -------------------------------------------------------------------------------

    def get_slice(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> Slice:
        """The instance NAME; else the MIG NAME (a multi-host slice); else GONE."""
        try:
            instance = self._call(f"getting instance {name}", self._instances.get,
                                  project=project, zone=zone, instance=name)
        except NotFoundError:
            pass
        else:
            return read_slice(instance, zone, self._preempted(project, zone, [instance]))
        return self._get_mig_slice(project, zone, name)

    def list_slices(self, project: str, zone: str) -> dict[str, Slice]:
        """Every TPU VM of the zone that no MIG manages, and every TPU MIG: one instances list,
        one MIG list, and one listManagedInstances per TPU MIG."""
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        preempted = self._preempted(project, zone, instances.values())
        found, members = self._mig_slices(project, zone, instances, preempted)
        for name, instance in instances.items():
            if name not in members:
                found[name] = read_slice(instance, zone, preempted)
        return found

    def list_tpu_resources(self, project: str, zone: str) -> list[TpuResource]:
        """What `tpujob gc` weighs: lone TPU VMs ("instance"), and a multi-host slice's MIGs,
        templates and workload policies (MigSlices._mig_resources)."""
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        migs, leftovers, members = self._mig_resources(project, zone, instances)
        lone = [TpuResource("instance", i.name, zone, i.status, labels=dict(i.labels),
                            created=rfc3339(i.creation_timestamp), accelerator_type=shorten(i.machine_type),
                            hosts=read_hosts(i), data_disks=read_data_disks(i),
                            spot=i.scheduling.provisioning_model == "SPOT", metadata=read_metadata(i))
                for i in instances.values() if i.name not in members]
        return migs + lone + leftovers

    def host_keys(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> dict[int, list[str]]:
        """Each VM's SSH host keys ("TYPE BASE64") from its `hostkeys/` guest attributes, by
        host index (a MIG's members in host_order)."""
        try:
            return {0: self._vm_host_keys(project, zone, name)}
        except NotFoundError:
            pass
        return self._member_host_keys(project, zone, name)  # NotFoundError: no such slice either

    def _vm_host_keys(self, project: str, zone: str, name: str) -> list[str]:
        # query_path is a field of the request, not a keyword of the method (compute_v1).
        answer = self._call(f"reading host keys of {name}", self._instances.get_guest_attributes,
                            compute_v1.GetGuestAttributesInstanceRequest(
                                project=project, zone=zone, instance=name, query_path="hostkeys/"))
        return [f"{item.key} {item.value}" for item in answer.query_value.items
                if item.namespace == "hostkeys"]

    # ---- delete -----------------------------------------------------------------------------

    def delete_node(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        """Delete the instance NAME; if there is none, the multi-host slice NAME
        (MigSlices._delete_mig). Safe to call twice."""
        what = f"deleting instance {name}"
        try:
            op = self._call(what, self._instances.delete, project=project, zone=zone, instance=name)
        except NotFoundError:
            return self._delete_mig(project, zone, name, timeout)
        self._wait(f"projects/{project}/zones/{zone}/operations/{op.name}", what, timeout=timeout)

    def delete_queued_resource(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        return None  # none on this path

    def delete_slice(self, project: str, zone: str, name: str, timeout: float = 600.0,
                     slices: int = 1, nodes: Sequence[str] = ()) -> None:
        self.delete_node(project, zone, name, timeout)

    # ---- plumbing ---------------------------------------------------------------------------

    def _tpu_instances(self, project: str, zone: str) -> list[compute_v1.Instance]:
        items = self._call(f"listing instances in {zone}",
                           lambda: list(self._instances.list(project=project, zone=zone)))
        return [i for i in items if shorten(i.machine_type).startswith(TPU_MACHINE_PREFIXES)]

    def _preempted(self, project: str, zone: str, instances: Iterable[compute_v1.Instance]) -> frozenset[str]:
        """The names of the zone's VMs whose preemption Compute Engine recorded (a
        `compute.instances.preempted` operation: compute_instances.phase_of); one
        zoneOperations.list, asked only when one of `instances` is stopped."""
        if not any(i.status in STOPPED_STATUSES for i in instances):
            return frozenset()
        request = compute_v1.ListZoneOperationsRequest(project=project, zone=zone,
                                                        filter=f'operationType="{PREEMPTED_OPERATION}"')
        ops = self._call(f"listing preemptions in {zone}", lambda: list(self._zone_ops.list(request=request)))
        return frozenset(shorten(op.target_link) for op in ops if op.operation_type == PREEMPTED_OPERATION)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def attempt() -> Any:
            with self._count_lock:
                self.api_calls += 1
            return fn(*args, **kwargs)

        return invoke(self._retry, what, attempt, COMPUTE)
