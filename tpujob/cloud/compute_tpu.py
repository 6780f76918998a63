"""The Cloud protocol over Compute Engine (google-cloud-compute, REST): a TPU VM is an instance
with a TPU machine type. Google's path for TPU7x and later, and for flex-start and reservations
(docs/compute-engine.md has every fact with its source).

A single-host slice is one instance named NAME. A slice of several hosts is three resources, all
named NAME: a regional workload policy (its accelerator topology), a global instance template
(the one-VM body of a single-host slice) and a zonal BULK managed instance group of shape.hosts
VMs (NAME-xxxx) that Compute Engine makes into one ICI slice. Here, in one class, both shapes:
their bodies, creation, reading as a slice, deletion and listing for `tpujob gc`, and what they
share (clients, operations, retries). An instance's fields as tpujob reads them:
tpujob.cloud.compute_instances. Import lazily: compute_v1 costs seconds to import.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from google.cloud import compute_v1

from tpujob import catalogue
from tpujob.cloud.api_calls import emulator_settings, invoke, new_retry
from tpujob.cloud.base import Host, Slice, SlicePhase, SliceRequest, TpuResource
from tpujob.cloud.compute_instances import (
    INSTANCE_PHASES,
    PREEMPTED_OPERATION,
    STOPPED_STATUSES,
    read_address,
    read_data_disks,
    read_hosts,
    read_maintenance,
    read_metadata,
    read_slice,
    shorten,
)
from tpujob.cloud.disks import COMPUTE, operation_failure, rfc3339, typed_error
from tpujob.compute_shapes import BOOT_DISK_GB, compute_shape, multi_host_refusal
from tpujob.errors import CloudError, ConfigError, ConflictError, NotFoundError, UsageError
from tpujob.names import JOB_LABEL, SLICE_NAME

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

# workloadPolicy: acceleratorTopology needs HIGH_THROUGHPUT (Terraform google provider schema;
# peers send just type and topology: gke-labs/tpu-operator pkg/converter/workloadpolicy.go).
WORKLOAD_POLICY_TYPE = "HIGH_THROUGHPUT"
# targetSizePolicy.mode BULK: "MIGs with TPU accelerator topology require BULK mode in target
# size policy" (facts: memory-layers TPU runbook); REST must send it, gcloud adds it itself.
TARGET_SIZE_MODE = "BULK"
# instanceLifecyclePolicy.defaultActionOnFailure: flex-start requires DO_NOTHING
# (cloud.google.com/compute/docs/instance-groups/about-bulk-mode); peers set it on every
# multi-host TPU MIG so that one VM is never repaired alone (wchen99998/skypilot
# sky/provision/gcp/mig_utils.py). A lost host is tpujob's to act on: delete and re-create.
ON_FAILURE = "DO_NOTHING"
# A flex-start slice: "put FLEX_START in the template, create a BULK MIG at size 0, resize to N",
# as "Creating resize requests for managed instance group with TPU is not allowed" (facts:
# memory-layers TPU runbook, a user report); bulk mode grows a MIG only from target size 0
# (cloud.google.com/compute/docs/instance-groups/about-bulk-mode). The resize is
# instanceGroupManagers.resize, POST .../instanceGroupManagers/NAME/resize?size=N, no body
# (compute.v1 discovery).
GROWN_BY_RESIZE = frozenset({"flex-start"})


# A TPU VM says which TPU worker it is in its metadata: `tpu-env`'s "WORKER_ID: 'N'" line (the
# YAML torch_xla's get_tpu_env reads from instance/attributes/tpu-env; a real one is quoted in
# penghao-wu/cambrian test_tpu.py, a user's), or a `worker-id` item (issue 46's report). Hosts
# are indexed by it, worker 0 first (the coordinator); a VM that says none comes after, by name.
# The only order tpujob uses, here and in host_keys.
_WORKER_ID = re.compile(r"^WORKER_ID:\s*'?(\d+)'?\s*$", re.MULTILINE)


def worker_id(instance: compute_v1.Instance | None) -> int | None:
    """The VM's TPU worker id from its metadata, or None."""
    if instance is None:
        return None
    items = read_metadata(instance)
    if items.get("worker-id", "").strip().isdigit():
        return int(items["worker-id"])
    found = _WORKER_ID.search(items.get("tpu-env", ""))
    return int(found.group(1)) if found else None


def host_order(names: Iterable[str], instances: dict[str, compute_v1.Instance]) -> list[str]:
    """`names` (a MIG's VMs) by TPU worker id, then by name where a VM says none."""
    def key(name: str) -> tuple[int, int, str]:
        worker = worker_id(instances.get(name))
        return (0, worker, name) if worker is not None else (1, 0, name)

    return sorted(names, key=key)


class ComputeTpuCloud:
    """TPU VMs as Compute Engine instances; a multi-host slice as a BULK MIG (below its lone VM's).
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
        if api != catalogue.COMPUTE:  # not compute.googleapis.com (cloud/disks.COMPUTE)
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
        flex-start slice's MIG is inserted at size 0 and resized (_request_mig): the
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
        templates and workload policies (_mig_resources)."""
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
        (_delete_mig). Safe to call twice."""
        if not self._delete(f"deleting instance {name}", _scope("zones", project, zone), timeout,
                            self._instances.delete, project=project, zone=zone, instance=name):
            self._delete_mig(project, zone, name, timeout)

    def _delete(self, what: str, scope: str, timeout: float, fn: Callable[..., Any], **kwargs: Any) -> bool:
        """Delete through `fn(**kwargs)` and wait for its operation (in `scope`). False, nothing
        to wait for, where Google answers 404: there is none, deleted already."""
        try:
            op = self._call(what, fn, **kwargs)
        except NotFoundError:
            return False
        self._wait(f"{scope}/operations/{op.name}", what, timeout=timeout)
        return True

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


    # ---- a multi-host slice (MIG): create ----------------------------------------------------

    def _request_mig(self, request: SliceRequest) -> str:
        """The policy, then the template, each insert waited for (a 409 adopts what a crashed
        try made: one name per slice, derived, never random), then the MIG. Its insert's 409
        leaves as ConflictError, as a single-host insert's does: the caller adopts it.

        Flex-start (GROWN_BY_RESIZE): the MIG is inserted at targetSize 0 and waited for, then
        resized to the host count and that waited for ("marked DONE when the resize actions are
        scheduled", compute.v1 discovery); the resize's zone operation is returned. A retry
        adopts a MIG its 409 finds at targetSize 0 and resizes it; one already grown leaves as
        ConflictError (adopted by the caller), never resized twice."""
        project, zone, name = request.project, request.zone, request.name
        refused = multi_host_refusal(request.accelerator_type, compute_shape(request.accelerator_type).hosts,
                                     request.provisioning)
        if refused is not None:  # validate refuses it first; never sent to Google
            raise UsageError(refused)
        region = _region(zone)
        self._insert_and_wait(f"creating workload policy {name}", self._policies.insert,
                              _scope("regions", project, region), project=project, region=region,
                              resource_policy_resource=self._workload_policy(request))
        self._insert_and_wait(f"creating instance template {name}", self._templates.insert,
                              _scope("global", project), project=project,
                              instance_template_resource=self._template(request))
        what = f"creating managed instance group {name}"
        if request.provisioning not in GROWN_BY_RESIZE:
            op = self._call(what, self._migs.insert, project=project, zone=zone,
                            instance_group_manager_resource=self._mig(request))
            return f"projects/{project}/zones/{zone}/operations/{op.name}"
        zone_ops = _scope("zones", project, zone) + "/operations"
        try:
            op = self._call(what, self._migs.insert, project=project, zone=zone,
                            instance_group_manager_resource=self._mig(request, size=0))
        except ConflictError:
            found = self._call(f"getting managed instance group {name}", self._migs.get,
                               project=project, zone=zone, instance_group_manager=name)
            if found.target_size != 0:
                raise  # resized by an earlier try: the caller adopts it
        else:
            self._wait(f"{zone_ops}/{op.name}", what, create=True)
        hosts = compute_shape(request.accelerator_type).hosts
        what = f"resizing managed instance group {name} to {hosts}"
        op = self._call(what, self._migs.resize, project=project, zone=zone,
                        instance_group_manager=name, size=hosts)
        self._wait(f"{zone_ops}/{op.name}", what, create=True)
        return f"{zone_ops}/{op.name}"

    def _workload_policy(self, request: SliceRequest) -> compute_v1.ResourcePolicy:
        shape = compute_shape(request.accelerator_type)
        return compute_v1.ResourcePolicy(
            name=request.name, workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
                type_=WORKLOAD_POLICY_TYPE, accelerator_topology=shape.topology))

    def _template(self, request: SliceRequest) -> compute_v1.InstanceTemplate:
        """The one-VM body `_instance` builds, as InstanceProperties: there machineType and the
        boot disk's diskType take bare names ("a full or partial URL ... will result in an
        INTERNAL_ERROR"), and an existing zonal disk's source its name (compute.v1 discovery,
        InstanceProperties.machineType, AttachedDiskInitializeParams.diskType,
        AttachedDisk.source). The labels ride in properties.labels: how `tpujob gc` tells a
        template's job (InstanceTemplate has no labels of its own)."""
        vm = self._instance(request)
        for disk in vm.disks:
            if disk.boot:
                disk.initialize_params.disk_type = shorten(disk.initialize_params.disk_type)
            else:
                disk.source = shorten(disk.source)
        scheduling = vm.scheduling
        if scheduling.provisioning_model == "RESERVATION_BOUND":
            # In a MIG template RESERVATION_BOUND needs instanceTerminationAction DELETE (facts:
            # third-party TPU7x guide); FLEX_START's maxRunDuration is set by _instance.
            scheduling.instance_termination_action = "DELETE"
        properties = compute_v1.InstanceProperties(
            machine_type=shorten(vm.machine_type), labels=dict(vm.labels), metadata=vm.metadata,
            disks=list(vm.disks), network_interfaces=list(vm.network_interfaces), tags=vm.tags,
            scheduling=scheduling, service_accounts=list(vm.service_accounts))
        if "reservation_affinity" in vm:
            properties.reservation_affinity = vm.reservation_affinity
        return compute_v1.InstanceTemplate(name=request.name, properties=properties,
                                           description=f"tpujob slice {request.name}")

    def _mig(self, request: SliceRequest, size: int | None = None) -> compute_v1.InstanceGroupManager:
        """The MIG's body: targetSize `size`, else the host count."""
        project, name = request.project, request.name
        region = _region(request.zone)
        return compute_v1.InstanceGroupManager(
            name=name, base_instance_name=name,
            target_size=compute_shape(request.accelerator_type).hosts if size is None else size,
            instance_template=f"projects/{project}/global/instanceTemplates/{name}",
            target_size_policy=compute_v1.InstanceGroupManagerTargetSizePolicy(mode=TARGET_SIZE_MODE),
            instance_lifecycle_policy=compute_v1.InstanceGroupManagerInstanceLifecyclePolicy(
                default_action_on_failure=ON_FAILURE),
            # A bare policy name is "The URL is malformed." (facts: memory-layers TPU runbook).
            resource_policies=compute_v1.InstanceGroupManagerResourcePolicies(
                workload_policy=f"projects/{project}/regions/{region}/resourcePolicies/{name}"))

    def _insert_and_wait(self, what: str, insert: Callable[..., Any], scope: str, **kwargs: Any) -> None:
        try:
            op = self._call(what, insert, **kwargs)
        except ConflictError:
            return  # made by an earlier try: adopted
        self._wait(f"{scope}/operations/{op.name}", what, create=True)

    # ---- a MIG read -------------------------------------------------------------------------

    def _get_mig_slice(self, project: str, zone: str, name: str) -> Slice:
        """The MIG NAME as a slice; GONE when there is none."""
        try:
            mig = self._call(f"getting managed instance group {name}", self._migs.get,
                             project=project, zone=zone, instance_group_manager=name)
        except NotFoundError:
            return Slice(name=name, zone=zone, phase=SlicePhase.GONE)
        managed = self._managed(project, zone, name)
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        preempted = self._preempted(project, zone, [i for i in instances.values() if i.name in
                                                    {m.name for m in managed}])
        return self._mig_slice(project, zone, mig, managed, instances, preempted)

    def _mig_slices(self, project: str, zone: str, instances: dict[str, compute_v1.Instance],
                    preempted: frozenset[str] = frozenset()) -> tuple[dict[str, Slice], set[str]]:
        """Every TPU MIG of the zone as a slice (one MIG list, one listManagedInstances per
        MIG), and which of `instances` are their VMs."""
        found: dict[str, Slice] = {}
        members: set[str] = set()
        migs = self._tpu_migs(project, zone)
        for mig in migs:
            managed = self._managed(project, zone, mig.name)
            members.update(m.name for m in managed)
            found[mig.name] = self._mig_slice(project, zone, mig, managed, instances, preempted)
        return found, members | {n for n in instances if _member_by_name(n, migs)}

    def _mig_slice(self, project: str, zone: str, mig: compute_v1.InstanceGroupManager,
                   managed: list[compute_v1.ManagedInstance],
                   instances: dict[str, compute_v1.Instance], preempted: frozenset[str] = frozenset()) -> Slice:
        """A MIG's phase, from the MIG and its managed instances, in this order:
        a member TERMINATED/STOPPED -> PREEMPTED if `preempted` names it (its preemption's
        operation: compute_instances.phase_of), else FAILED (stopped, not preempted); a member
        PENDING_STOP/STOPPING (in its shutdown: its program may be saving) -> STOPPING;
        targetSize 0 (a flex-start MIG before its resize) -> QUEUED once asked to grow (not
        stable), else PROVISIONING (_size_zero); topology FAILED -> FAILED; not stable
        (or bulkInstanceOperation in progress) -> FAILED when a member's lastAttempt has an error
        (typed: a stockout is a StockoutError), else QUEUED while a member is PENDING (flex-start), else PROVISIONING;
        stable with every member RUNNING and targetSize of them -> READY with one Host per VM
        in host_order (by TPU worker id); stable with fewer -> FAILED with listErrors' latest error. Peers call a
        slice ready on isStable and running == targetSize, failed when stable with fewer
        (facts: wchen99998/skypilot).

        A BULK MIG retries a stockout for ever (ManagedInstance.currentAction CREATING
        "retries until success", compute.v1 discovery); tpujob gives the slice up as FAILED
        with the typed error, as the single-host insert's operation would end, so the
        reconcile decides on it as a capacity miss (backoff, then the next placement). No
        Google source says when to stop waiting: this is tpujob's choice."""
        name, target = mig.name, mig.target_size
        statuses = {m.name: m.instance_status for m in managed}
        applied = mig.status.applied_accelerator_topologies
        topology = applied[0].state if applied else ""
        stable = mig.status.is_stable and not mig.status.bulk_instance_operation.in_progress
        running = sorted(n for n, s in statuses.items() if s == "RUNNING")
        state = f"{topology or ('STABLE' if stable else 'CREATING')} ({len(running)}/{target} RUNNING)"
        vms = [instances[n] for n in host_order(statuses, instances) if n in instances]
        # The disks every VM has (the template's): a VM made without one lacks it (check_disks).
        held = [set(read_data_disks(vm)) for vm in vms]
        base: dict[str, Any] = dict(name=name, zone=zone, node_state=state,
                    data_disks=tuple(sorted(set.intersection(*held))) if held else (),
                    accelerator_type=shorten(vms[0].machine_type) if vms else None,
                    labels=dict(vms[0].labels) if vms else {}, metadata=read_metadata(vms[0]) if vms else {},
                    node_create_time=rfc3339(mig.creation_timestamp))
        what = f"creating managed instance group {name}"
        lost = sorted(n for n, s in statuses.items() if s in STOPPED_STATUSES)
        if lost:
            taken = [n for n in lost if n in preempted]
            if taken:
                return Slice(phase=SlicePhase.PREEMPTED, detail=f"{', '.join(taken)}: "
                             f"{', '.join(statuses[n] for n in taken)}, preempted", **base)
            return Slice(phase=SlicePhase.FAILED, detail=f"{', '.join(lost)}: {', '.join(statuses[n] for n in lost)}, "
                         "not preempted (stopped, or a host error Google did not repair)", **base)
        stopping = sorted(n for n, s in statuses.items() if INSTANCE_PHASES.get(s) is SlicePhase.STOPPING)
        if stopping:
            return Slice(phase=SlicePhase.STOPPING, detail=f"{', '.join(stopping)}: "
                         f"{', '.join(statuses[n] for n in stopping)}", **base)
        if target == 0:
            return self._size_zero(stable, base)
        # A try's errors: each member's lastAttempt, and the bulk operation's last progress
        # check ("Errors encountered during bulk instance operation", google-cloud-compute
        # InstanceGroupManagerStatusBulkInstanceOperationLastProgressCheck), where a BULK MIG
        # that made no VM yet shows its stockout.
        attempt = [e for m in managed for e in m.last_attempt.errors.errors] \
            + list(mig.status.bulk_instance_operation.last_progress_check.error.errors)
        if topology == "FAILED" or (stable and (len(running) < target or len(statuses) < target)):
            code, message = (attempt[-1].code, attempt[-1].message) if attempt \
                else self._latest_error(project, zone, name)
            if not code and applied and applied[0].state_details.error.errors:
                first = applied[0].state_details.error.errors[0]
                code, message = first.code, first.message
            failure = typed_error(code, message, what) if code else None
            return Slice(phase=SlicePhase.FAILED, failure=failure,
                         detail=f"{code}: {message}" if code else f"{state}: not every VM runs", **base)
        if not stable:
            if attempt:
                return Slice(phase=SlicePhase.FAILED, failure=typed_error(attempt[-1].code, attempt[-1].message, what),
                             detail=f"{attempt[-1].code}: {attempt[-1].message}", **base)
            pending = any(s == "PENDING" for s in statuses.values())
            return Slice(phase=SlicePhase.QUEUED if pending else SlicePhase.PROVISIONING, **base)
        if applied and topology != "ACTIVE":
            # Every VM runs, but the slice is one ICI slice only once its topology is ACTIVE
            # (ACTIVATING, REACTIVATING: "being activated"; google-cloud-compute
            # InstanceGroupManagerStatusAcceleratorTopology): not READY yet.
            return Slice(phase=SlicePhase.PROVISIONING, detail=f"topology {topology}", **base)
        hosts = tuple(Host(i, *read_address(vm)) for i, vm in enumerate(vms))
        # The slice's maintenance: the soonest window any of its VMs announces (one VM down is
        # the slice down).
        windows = [w for w in map(read_maintenance, vms) if w is not None]
        soonest = min(windows, key=lambda w: w.start if w.start is not None else 0.0) if windows else None
        return Slice(phase=SlicePhase.READY, hosts=hosts, maintenance=soonest, **base)

    @staticmethod
    def _size_zero(stable: bool, base: dict[str, Any]) -> Slice:
        """A MIG at targetSize 0: tpujob makes one only for a flex-start slice, resized at once
        after its insert. Not stable (a resize under way, or a MIG that grows as Google keeps
        it waiting): QUEUED, waiting for capacity. Stable: nothing asked of it, a create cut
        off between the insert and the resize: PROVISIONING, so that the provisioning timeout
        replaces it rather than a queue waiting for ever. tpujob's choice: no source says how
        Google shows a BULK MIG between a resize and its VMs."""
        if stable:
            return Slice(phase=SlicePhase.PROVISIONING, detail="targetSize 0: not resized", **base)
        return Slice(phase=SlicePhase.QUEUED, detail="targetSize 0: waiting to grow", **base)

    def _latest_error(self, project: str, zone: str, name: str) -> tuple[str, str]:
        """listErrors' latest `error{code, message}` (compute.v1 discovery), or ("", "")."""
        items = self._call(f"listing errors of managed instance group {name}",
                           lambda: list(self._migs.list_errors(project=project, zone=zone,
                                                                instance_group_manager=name)))
        if not items:
            return "", ""
        latest = max(items, key=lambda e: e.timestamp)
        return latest.error.code, latest.error.message

    def _member_host_keys(self, project: str, zone: str, name: str) -> dict[int, list[str]]:
        """Each VM's host keys of the MIG NAME by host index (NotFoundError: no such MIG)."""
        managed = self._managed(project, zone, name)
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        return {index: self._vm_host_keys(project, zone, member)
                for index, member in enumerate(host_order([m.name for m in managed], instances))}

    def _mig_resources(self, project: str, zone: str, instances: dict[str, compute_v1.Instance]
                       ) -> tuple[list[TpuResource], list[TpuResource], set[str]]:
        """For `tpujob gc`: the zone's TPU MIGs ("mig": deleting one takes its template and
        policy along); the templates ("instance-template") and workload policies
        ("workload-policy") of a slice whose MIG is not in this zone (a create that crashed
        before its MIG, or a MIG deleted alone); and which of `instances` are MIG VMs. A
        template's labels are its properties.labels. A resource policy has no labels
        (compute.v1 discovery, ResourcePolicy): one of tpujob's is told by its name
        (tpujob.names.slice_name, SLICE_NAME) and takes the labels of the template of the same
        name, else only the job's label its name holds (gc tells its store by the tag in its
        name). Templates are global: one may be listed for every zone gc looks in."""
        migs = self._tpu_migs(project, zone)
        templates = {t.name: t for t in self._call(
            "listing instance templates", lambda: list(self._templates.list(project=project)))}
        region = _region(zone)
        policies = [p for p in self._call(
            f"listing resource policies in {region}",
            lambda: list(self._policies.list(project=project, region=region)))
            if p.workload_policy.accelerator_topology and SLICE_NAME.match(p.name)]
        found: list[TpuResource] = []
        members: set[str] = set()
        preempted = self._preempted(project, zone, instances.values())
        for mig in migs:
            managed = self._managed(project, zone, mig.name)
            members.update(m.name for m in managed)
            seen = self._mig_slice(project, zone, mig, managed, instances, preempted)
            template = templates.get(shorten(mig.instance_template))
            props = template.properties if template is not None else None
            found.append(TpuResource(
                "mig", mig.name, zone, seen.node_state or "",
                labels=dict(props.labels) if props is not None else dict(seen.labels),
                created=rfc3339(mig.creation_timestamp), accelerator_type=seen.accelerator_type,
                hosts=seen.hosts, spot=props is not None and props.scheduling.provisioning_model == "SPOT",
                metadata={i.key: i.value for i in props.metadata.items} if props is not None else {}))
        leftovers = []
        in_zone = {m.name for m in migs}
        for t in templates.values():
            if t.name not in in_zone and JOB_LABEL in t.properties.labels:
                leftovers.append(TpuResource("instance-template", t.name, zone, "READY",
                                             labels=dict(t.properties.labels),
                                             created=rfc3339(t.creation_timestamp),
                                             accelerator_type=t.properties.machine_type))
        for p in policies:
            if p.name not in in_zone:
                owner = templates.get(p.name)
                named = SLICE_NAME.match(p.name)  # always: `policies` holds only names it matches
                labels = dict(owner.properties.labels) if owner is not None \
                    else {JOB_LABEL: named.group("job") if named else ""}
                leftovers.append(TpuResource("workload-policy", p.name, zone, p.status, labels=labels,
                                             created=rfc3339(p.creation_timestamp)))
        return found, leftovers, members | {n for n in instances if _member_by_name(n, migs)}

    def _tpu_migs(self, project: str, zone: str) -> list[compute_v1.InstanceGroupManager]:
        """The zone's MIGs with a workload policy: TPU slices (tpujob makes no other MIG)."""
        items = self._call(f"listing managed instance groups in {zone}",
                           lambda: list(self._migs.list(project=project, zone=zone)))
        return [m for m in items if m.resource_policies.workload_policy]

    def _managed(self, project: str, zone: str, name: str) -> list[compute_v1.ManagedInstance]:
        managed: list[compute_v1.ManagedInstance] = self._call(f"listing the VMs of managed instance group {name}",
                          lambda: list(self._migs.list_managed_instances(
                              project=project, zone=zone, instance_group_manager=name)))
        return managed

    # ---- a MIG deleted ----------------------------------------------------------------------

    def _delete_mig(self, project: str, zone: str, name: str, timeout: float) -> None:
        """The MIG (waited for: its VMs go with it), then its template, then its workload
        policy, each missing one skipped."""
        self._delete(f"deleting managed instance group {name}", _scope("zones", project, zone), timeout,
                     self._migs.delete, project=project, zone=zone, instance_group_manager=name)
        self.delete_template(project, name, timeout)
        self.delete_workload_policy(project, _region(zone), name, timeout)

    def delete_template(self, project: str, name: str, timeout: float = 600.0) -> None:
        self._delete(f"deleting instance template {name}", _scope("global", project), timeout,
                     self._templates.delete, project=project, instance_template=name)

    def delete_workload_policy(self, project: str, region: str, name: str, timeout: float = 600.0) -> None:
        self._delete(f"deleting workload policy {name}", _scope("regions", project, region), timeout,
                     self._policies.delete, project=project, region=region, resource_policy=name)


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]  # us-east5-a -> us-east5


def _scope(kind: str, project: str, where: str = "") -> str:
    return f"projects/{project}/{kind}/{where}" if where else f"projects/{project}/{kind}"


def _member_by_name(name: str, migs: Sequence[compute_v1.InstanceGroupManager]) -> bool:
    """A VM a MIG made that its listManagedInstances did not show (yet): BASE-xxxx, as the MIG
    names them ("appends a hyphen and a random four-character string", compute.v1 discovery,
    InstanceGroupManager.baseInstanceName). Compute's `created-by` metadata is not in the
    discovery document nor served by the emulator: not read."""
    return any(re.fullmatch(re.escape(m.base_instance_name) + r"-[a-z0-9]{4}", name) for m in migs)
