"""The Cloud protocol over Compute Engine (google-cloud-compute, REST): a TPU VM is an instance
with a TPU machine type. Google's path for TPU7x and later, and for flex-start and reservations
(docs/compute-engine.md; shared/facts/compute-engine-tpu.md has every fact with its source).

A single-host slice is one instance named NAME. A slice of several hosts is three resources,
all named NAME: a regional workload policy (its accelerator topology), a global instance
template (the one-VM body of a single-host slice) and a zonal BULK managed instance group of
shape.hosts VMs (NAME-xxxx) that Compute Engine makes into one ICI slice. Import lazily:
compute_v1 costs seconds to import.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Sequence

from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tpujob.catalogue import compute_shape
from tpujob.cloud.base import Host, Slice, SlicePhase, SliceRequest, TpuResource
from tpujob.cloud.compute import COMPUTE, operation_failure, rfc3339
from tpujob.cloud.errors import classify, invoke, new_retry
from tpujob.errors import CloudError, ConfigError, ConflictError, NotFoundError, UsageError
from tpujob.names import JOB_LABEL

# compute.v1 discovery, Instance.status, to the phases the reconcile decides on. PENDING is
# flex-start "waiting for available capacity from Dynamic Workload Scheduler": queued.
# TERMINATED is how a preempted Spot VM (instanceTerminationAction STOP) or a failed one
# stays: "must be deleted and recreated" (cloud.google.com/tpu/docs/spot-compute), the same
# remedy as a preempted node. STOPPING/PENDING_STOP lead there. SUSPENDED is not asked for by
# tpujob: a VM found so is as good as lost. REPAIRING: Google restarts a failed on-demand,
# flex-start or reserved TPU VM on healthy hardware (cloud.google.com/tpu/docs/failure-recovery).
INSTANCE_PHASES: dict[str, SlicePhase] = {
    "PENDING": SlicePhase.QUEUED,
    "PROVISIONING": SlicePhase.PROVISIONING,
    "STAGING": SlicePhase.PROVISIONING,
    "REPAIRING": SlicePhase.PROVISIONING,
    "RUNNING": SlicePhase.READY,
    "PENDING_STOP": SlicePhase.PREEMPTED,
    "STOPPING": SlicePhase.PREEMPTED,
    "TERMINATED": SlicePhase.PREEMPTED,
    "STOPPED": SlicePhase.PREEMPTED,
    "SUSPENDING": SlicePhase.FAILED,
    "SUSPENDED": SlicePhase.FAILED,
    "DEPROVISIONING": SlicePhase.DELETING,
}
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

# ---- multi-host slices (a BULK MIG with a workload policy): the choices in one place -------
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
# Which member is TPU worker 0 is unknown (facts: "Unknown: which member is worker 0"). Hosts
# are indexed by instance name, sorted: the only order tpujob uses, here and in host_keys.
def host_order(names: Sequence[str]) -> list[str]:
    return sorted(names)


# What a member VM's lastAttempt or the MIG's listErrors report is typed as (errors.classify):
# a BULK MIG retries a stockout for ever (ManagedInstance.currentAction CREATING "retries until
# success", compute.v1 discovery); tpujob gives the slice up as FAILED with the typed error,
# as the single-host insert's operation would end, so the reconcile decides on it as a
# capacity miss (backoff, then the next placement). No Google source says when to stop
# waiting: this is tpujob's choice.
SLICE_NAME = re.compile(r"^tpujob-(\d{6})-\d+$")  # tpujob.names.slice_name


class ComputeTpuCloud:
    """TPU VMs as Compute Engine instances. `api_calls` counts every request sent."""

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
        kwargs.setdefault("retry_initial", 0.05)
        kwargs.setdefault("retry_maximum", 0.5)
        kwargs.setdefault("poll_interval", 0.05)
        return cls(endpoint=endpoint, credentials=AnonymousCredentials(), **kwargs)

    def for_api(self, api: str) -> ComputeTpuCloud:
        if api != "compute":
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
        its MIG); the last insert's zone operation's path, not waited for."""
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
        metadata = dict(request.metadata)
        if request.ssh_keys:
            metadata["ssh-keys"] = "\n".join(filter(None, [metadata.get("ssh-keys"), *request.ssh_keys]))
        # TPU VMs cannot live-migrate: onHostMaintenance TERMINATE (facts: Google's create
        # command). Spot and flex-start are not restarted by Compute Engine after a stop.
        scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE", provisioning_model=model,
                                           automatic_restart=model in ("STANDARD", "RESERVATION_BOUND"))
        if model == "SPOT":
            scheduling.instance_termination_action = "STOP"  # a preempted VM stays, TERMINATED
        if model == "FLEX_START":
            scheduling.instance_termination_action = "DELETE"
            scheduling.max_run_duration = compute_v1.Duration(seconds=request.max_run_duration_seconds or 0)
        instance = compute_v1.Instance(
            name=request.name, machine_type=f"zones/{zone}/machineTypes/{shape.machine_type}",
            labels={**self.labels, **request.labels},
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=f"projects/{shape.image_project}/global/images/family/{shape.image_family}",
                    disk_type=f"zones/{zone}/diskTypes/{shape.boot_disk_type}"))]
            + [compute_v1.AttachedDisk(source=d.source, mode="READ_ONLY" if d.read_only else "READ_WRITE")
               for d in request.data_disks],
            network_interfaces=[compute_v1.NetworkInterface(
                network=request.network or "global/networks/default",
                subnetwork=request.subnetwork or None,
                access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
                if request.external_ips else [])],
            tags=compute_v1.Tags(items=list(request.tags)),
            scheduling=scheduling,
            service_accounts=[compute_v1.ServiceAccount(email="default", scopes=list(SCOPES))])
        if model == "RESERVATION_BOUND":
            instance.reservation_affinity = compute_v1.ReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY,
                values=[request.reservation or ""])
        return instance

    # ---- multi-host slices: workload policy, instance template, BULK MIG --------------------

    def _request_mig(self, request: SliceRequest) -> str:
        """The policy, then the template, each insert waited for (a 409 adopts what a crashed
        try made: one name per slice, derived, never random), then the MIG. Its insert's 409
        leaves as ConflictError, as a single-host insert's does: the caller adopts it."""
        project, zone, name = request.project, request.zone, request.name
        region = _region(zone)
        self._insert_and_wait(f"creating workload policy {name}", self._policies.insert,
                              _scope("regions", project, region), project=project, region=region,
                              resource_policy_resource=self._workload_policy(request))
        self._insert_and_wait(f"creating instance template {name}", self._templates.insert,
                              _scope("global", project), project=project,
                              instance_template_resource=self._template(request))
        op = self._call(f"creating managed instance group {name}", self._migs.insert,
                        project=project, zone=zone, instance_group_manager_resource=self._mig(request))
        return f"projects/{project}/zones/{zone}/operations/{op.name}"

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
                disk.initialize_params.disk_type = _short(disk.initialize_params.disk_type)
            else:
                disk.source = _short(disk.source)
        scheduling = vm.scheduling
        if scheduling.provisioning_model == "RESERVATION_BOUND":
            # In a MIG template RESERVATION_BOUND needs instanceTerminationAction DELETE (facts:
            # third-party TPU7x guide); FLEX_START's maxRunDuration is set by _instance.
            scheduling.instance_termination_action = "DELETE"
        properties = compute_v1.InstanceProperties(
            machine_type=_short(vm.machine_type), labels=dict(vm.labels), metadata=vm.metadata,
            disks=list(vm.disks), network_interfaces=list(vm.network_interfaces), tags=vm.tags,
            scheduling=scheduling, service_accounts=list(vm.service_accounts))
        if "reservation_affinity" in vm:
            properties.reservation_affinity = vm.reservation_affinity
        return compute_v1.InstanceTemplate(name=request.name, properties=properties,
                                           description=f"tpujob slice {request.name}")

    def _mig(self, request: SliceRequest) -> compute_v1.InstanceGroupManager:
        project, name = request.project, request.name
        region = _region(request.zone)
        return compute_v1.InstanceGroupManager(
            name=name, base_instance_name=name,
            target_size=compute_shape(request.accelerator_type).hosts,
            instance_template=f"projects/{project}/global/instanceTemplates/{name}",
            target_size_policy=compute_v1.InstanceGroupManagerTargetSizePolicy(mode=TARGET_SIZE_MODE),
            instance_lifecycle_policy=compute_v1.InstanceGroupManagerInstanceLifecyclePolicy(
                default_action_on_failure=ON_FAILURE),
            # A bare policy name is "The URL is malformed." (facts: memory-layers TPU runbook).
            resource_policies=compute_v1.InstanceGroupManagerResourcePolicies(
                workload_policy=f"projects/{project}/regions/{region}/resourcePolicies/{name}"))

    def _insert_and_wait(self, what: str, insert: Callable, scope: str, **kwargs: Any) -> None:
        try:
            op = self._call(what, insert, **kwargs)
        except ConflictError:
            return  # made by an earlier try: adopted
        self._wait(f"{scope}/operations/{op.name}", what, create=True)

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
            return _slice(instance, zone)
        try:
            mig = self._call(f"getting managed instance group {name}", self._migs.get,
                             project=project, zone=zone, instance_group_manager=name)
        except NotFoundError:
            return Slice(name=name, zone=zone, phase=SlicePhase.GONE)
        managed = self._managed(project, zone, name)
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        return self._mig_slice(project, zone, mig, managed, instances)

    def list_slices(self, project: str, zone: str) -> dict[str, Slice]:
        """Every TPU VM of the zone that no MIG manages, and every TPU MIG: one instances list,
        one MIG list, and one listManagedInstances per TPU MIG."""
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        found: dict[str, Slice] = {}
        members: set[str] = set()
        migs = self._tpu_migs(project, zone)
        for mig in migs:
            managed = self._managed(project, zone, mig.name)
            members.update(m.name for m in managed)
            found[mig.name] = self._mig_slice(project, zone, mig, managed, instances)
        for name, instance in instances.items():
            if name not in members and not _member_by_name(name, migs):
                found[name] = _slice(instance, zone)
        return found

    def list_tpu_resources(self, project: str, zone: str) -> list[TpuResource]:
        """What `tpujob gc` weighs: lone TPU VMs ("instance"), TPU MIGs ("mig": deleting one
        takes its template and policy along), and the templates ("instance-template") and
        workload policies ("workload-policy") of a slice whose MIG is not in this zone (a
        create that crashed before its MIG, or a MIG deleted alone). A template's labels are
        its properties.labels. A resource policy has no labels (compute.v1 discovery,
        ResourcePolicy): one of tpujob's is told by its name (tpujob.names.slice_name,
        SLICE_NAME) and takes the labels of the template of the same name, else only the
        job's label its name holds (no store: gc weighs it as another store's, after
        --min-age). Templates are global: one may be listed for every zone gc looks in."""
        instances = {i.name: i for i in self._tpu_instances(project, zone)}
        migs = self._tpu_migs(project, zone)
        templates = {t.name: t for t in self._call(
            "listing instance templates", lambda: list(self._templates.list(project=project)))}
        region = _region(zone)
        policies = [p for p in self._call(
            f"listing resource policies in {region}",
            lambda: list(self._policies.list(project=project, region=region)))
            if p.workload_policy.accelerator_topology and SLICE_NAME.match(p.name)]
        found, members = [], set()
        for mig in migs:
            managed = self._managed(project, zone, mig.name)
            members.update(m.name for m in managed)
            seen = self._mig_slice(project, zone, mig, managed, instances)
            template = templates.get(_short(mig.instance_template))
            props = template.properties if template is not None else None
            found.append(TpuResource(
                "mig", mig.name, zone, seen.node_state or "",
                labels=dict(props.labels) if props is not None else dict(seen.labels),
                created=rfc3339(mig.creation_timestamp), accelerator_type=seen.accelerator_type,
                hosts=seen.hosts, spot=props is not None and props.scheduling.provisioning_model == "SPOT",
                metadata={i.key: i.value for i in props.metadata.items} if props is not None else {}))
        found += [TpuResource("instance", i.name, zone, i.status, labels=dict(i.labels),
                              created=rfc3339(i.creation_timestamp), accelerator_type=_short(i.machine_type),
                              hosts=_hosts(i), data_disks=tuple(_short(d.source) for d in i.disks if not d.boot),
                              spot=i.scheduling.provisioning_model == "SPOT", metadata=_metadata(i))
                  for i in instances.values() if i.name not in members and not _member_by_name(i.name, migs)]
        in_zone = {m.name for m in migs}
        for t in templates.values():
            if t.name not in in_zone and JOB_LABEL in t.properties.labels:
                found.append(TpuResource("instance-template", t.name, zone, "READY",
                                         labels=dict(t.properties.labels),
                                         created=rfc3339(t.creation_timestamp),
                                         accelerator_type=t.properties.machine_type))
        for p in policies:
            if p.name not in in_zone:
                owner = templates.get(p.name)
                labels = dict(owner.properties.labels) if owner is not None \
                    else {JOB_LABEL: SLICE_NAME.match(p.name).group(1)}
                found.append(TpuResource("workload-policy", p.name, zone, p.status, labels=labels,
                                         created=rfc3339(p.creation_timestamp)))
        return found

    def host_keys(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> dict[int, list[str]]:
        """Each VM's SSH host keys ("TYPE BASE64") from its `hostkeys/` guest attributes, by
        host index (a MIG's members in host_order)."""
        try:
            return {0: self._vm_host_keys(project, zone, name)}
        except NotFoundError:
            managed = self._managed(project, zone, name)  # NotFoundError: no such slice either
        return {index: self._vm_host_keys(project, zone, member)
                for index, member in enumerate(host_order([m.name for m in managed]))}

    def _vm_host_keys(self, project: str, zone: str, name: str) -> list[str]:
        # query_path is a field of the request, not a keyword of the method (compute_v1).
        answer = self._call(f"reading host keys of {name}", self._instances.get_guest_attributes,
                            compute_v1.GetGuestAttributesInstanceRequest(
                                project=project, zone=zone, instance=name, query_path="hostkeys/"))
        return [f"{item.key} {item.value}" for item in answer.query_value.items
                if item.namespace == "hostkeys"]

    def _mig_slice(self, project: str, zone: str, mig: compute_v1.InstanceGroupManager,
                   managed: list[compute_v1.ManagedInstance],
                   instances: dict[str, compute_v1.Instance]) -> Slice:
        """A MIG's phase, from the MIG and its managed instances, in this order:
        a member PENDING_STOP/STOPPING/TERMINATED/STOPPED (INSTANCE_PHASES: preempted) ->
        PREEMPTED; topology FAILED -> FAILED; not stable (or bulkInstanceOperation in
        progress) -> FAILED when a member's lastAttempt has an error (typed: a stockout is a
        StockoutError), else QUEUED while a member is PENDING (flex-start), else PROVISIONING;
        stable with every member RUNNING and targetSize of them -> READY with one Host per VM
        in host_order; stable with fewer -> FAILED with listErrors' latest error. Peers call a
        slice ready on isStable and running == targetSize, failed when stable with fewer
        (facts: wchen99998/skypilot)."""
        name, target = mig.name, mig.target_size
        statuses = {m.name: m.instance_status for m in managed}
        applied = mig.status.applied_accelerator_topologies
        topology = applied[0].state if applied else ""
        stable = mig.status.is_stable and not mig.status.bulk_instance_operation.in_progress
        running = sorted(n for n, s in statuses.items() if s == "RUNNING")
        state = f"{topology or ('STABLE' if stable else 'CREATING')} ({len(running)}/{target} RUNNING)"
        vms = [instances[n] for n in host_order(statuses) if n in instances]
        base = dict(name=name, zone=zone, node_state=state,
                    accelerator_type=_short(vms[0].machine_type) if vms else None,
                    labels=dict(vms[0].labels) if vms else {}, metadata=_metadata(vms[0]) if vms else {},
                    node_create_time=rfc3339(mig.creation_timestamp))
        what = f"creating managed instance group {name}"
        lost = sorted(n for n, s in statuses.items() if INSTANCE_PHASES.get(s) is SlicePhase.PREEMPTED)
        if lost:
            return Slice(phase=SlicePhase.PREEMPTED, detail=f"{', '.join(lost)}: "
                         f"{', '.join(statuses[n] for n in lost)}", **base)
        attempt = [e for m in managed for e in m.last_attempt.errors.errors]
        if topology == "FAILED" or (stable and (len(running) < target or len(statuses) < target)):
            code, message = (attempt[-1].code, attempt[-1].message) if attempt \
                else self._latest_error(project, zone, name)
            if not code and applied and applied[0].state_details.error.errors:
                first = applied[0].state_details.error.errors[0]
                code, message = first.code, first.message
            failure = _typed(code, message, what) if code else None
            return Slice(phase=SlicePhase.FAILED, failure=failure,
                         detail=f"{code}: {message}" if code else f"{state}: not every VM runs", **base)
        if not stable:
            if attempt:
                return Slice(phase=SlicePhase.FAILED, failure=_typed(attempt[-1].code, attempt[-1].message, what),
                             detail=f"{attempt[-1].code}: {attempt[-1].message}", **base)
            pending = any(s == "PENDING" for s in statuses.values())
            return Slice(phase=SlicePhase.QUEUED if pending else SlicePhase.PROVISIONING, **base)
        hosts = tuple(Host(i, *_address(vm)) for i, vm in enumerate(vms))
        return Slice(phase=SlicePhase.READY, hosts=hosts, **base)

    def _latest_error(self, project: str, zone: str, name: str) -> tuple[str, str]:
        """listErrors' latest `error{code, message}` (compute.v1 discovery), or ("", "")."""
        items = self._call(f"listing errors of managed instance group {name}",
                           lambda: list(self._migs.list_errors(project=project, zone=zone,
                                                                instance_group_manager=name)))
        if not items:
            return "", ""
        latest = max(items, key=lambda e: e.timestamp)
        return latest.error.code, latest.error.message

    # ---- delete -----------------------------------------------------------------------------

    def delete_node(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        """Delete the instance NAME; if there is none, the multi-host slice NAME: its MIG
        (waited for: its VMs go with it), then its template, then its workload policy, each
        missing one skipped. Safe to call twice."""
        what = f"deleting instance {name}"
        try:
            op = self._call(what, self._instances.delete, project=project, zone=zone, instance=name)
        except NotFoundError:
            return self._delete_mig(project, zone, name, timeout)
        self._wait(f"projects/{project}/zones/{zone}/operations/{op.name}", what, timeout=timeout)

    def _delete_mig(self, project: str, zone: str, name: str, timeout: float) -> None:
        what = f"deleting managed instance group {name}"
        try:
            op = self._call(what, self._migs.delete, project=project, zone=zone, instance_group_manager=name)
        except NotFoundError:
            pass
        else:
            self._wait(f"{_scope('zones', project, zone)}/operations/{op.name}", what, timeout=timeout)
        self.delete_template(project, name, timeout)
        self.delete_workload_policy(project, _region(zone), name, timeout)

    def delete_template(self, project: str, name: str, timeout: float = 600.0) -> None:
        what = f"deleting instance template {name}"
        try:
            op = self._call(what, self._templates.delete, project=project, instance_template=name)
        except NotFoundError:
            return
        self._wait(f"{_scope('global', project)}/operations/{op.name}", what, timeout=timeout)

    def delete_workload_policy(self, project: str, region: str, name: str, timeout: float = 600.0) -> None:
        what = f"deleting workload policy {name}"
        try:
            op = self._call(what, self._policies.delete, project=project, region=region, resource_policy=name)
        except NotFoundError:
            return
        self._wait(f"{_scope('regions', project, region)}/operations/{op.name}", what, timeout=timeout)

    def delete_queued_resource(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        return None  # none on this path

    def delete_slice(self, project: str, zone: str, name: str, timeout: float = 600.0,
                     slices: int = 1, nodes: Sequence[str] = ()) -> None:
        self.delete_node(project, zone, name, timeout)

    # ---- plumbing ---------------------------------------------------------------------------

    def _tpu_migs(self, project: str, zone: str) -> list[compute_v1.InstanceGroupManager]:
        """The zone's MIGs with a workload policy: TPU slices (tpujob makes no other MIG)."""
        items = self._call(f"listing managed instance groups in {zone}",
                           lambda: list(self._migs.list(project=project, zone=zone)))
        return [m for m in items if m.resource_policies.workload_policy]

    def _managed(self, project: str, zone: str, name: str) -> list[compute_v1.ManagedInstance]:
        return self._call(f"listing the VMs of managed instance group {name}",
                          lambda: list(self._migs.list_managed_instances(
                              project=project, zone=zone, instance_group_manager=name)))

    def _tpu_instances(self, project: str, zone: str) -> list[compute_v1.Instance]:
        items = self._call(f"listing instances in {zone}",
                           lambda: list(self._instances.list(project=project, zone=zone)))
        return [i for i in items if _short(i.machine_type).startswith(TPU_MACHINE_PREFIXES)]

    def _call(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        def attempt() -> Any:
            with self._count_lock:
                self.api_calls += 1
            return fn(*args, **kwargs)

        return invoke(self._retry, what, attempt, COMPUTE)


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]  # us-east5-a -> us-east5


def _scope(kind: str, project: str, where: str = "") -> str:
    return f"projects/{project}/{kind}/{where}" if where else f"projects/{project}/{kind}"


def _short(ref: str) -> str:
    return ref.rstrip("/").rsplit("/", 1)[-1] if ref else ""


def _address(instance: compute_v1.Instance) -> tuple[str, str | None]:
    """(internal, external or None) of the VM's first interface; ("", None) before it has one."""
    nic = instance.network_interfaces[0] if instance.network_interfaces else None
    if nic is None or not nic.network_i_p:
        return "", None
    external = nic.access_configs[0].nat_i_p if nic.access_configs else ""
    return nic.network_i_p, external or None


def _hosts(instance: compute_v1.Instance) -> tuple[Host, ...]:
    ip, external = _address(instance)
    return (Host(0, ip, external),) if ip else ()


def _member_by_name(name: str, migs: Sequence[compute_v1.InstanceGroupManager]) -> bool:
    """A VM a MIG made that its listManagedInstances did not show (yet): BASE-xxxx, as the MIG
    names them ("appends a hyphen and a random four-character string", compute.v1 discovery,
    InstanceGroupManager.baseInstanceName). Compute's `created-by` metadata is not in the
    discovery document nor served by the emulator: not read."""
    return any(re.fullmatch(re.escape(m.base_instance_name) + r"-[a-z0-9]{4}", name) for m in migs)


def _typed(code: str, message: str, what: str) -> Exception:
    """A MIG's creation error (`{code, message}` of lastAttempt or listErrors, no HTTP status)
    typed by the one classifier, as an operation's error is (errors.classify: a Compute
    stockout code gives StockoutError)."""
    err = gexc.GoogleAPICallError(message, errors=[{"reason": code, "message": message}])
    return classify(what, err, COMPUTE, create_operation=True)


def _metadata(instance: compute_v1.Instance) -> dict[str, str]:
    return {item.key: item.value for item in instance.metadata.items}


def _slice(instance: compute_v1.Instance, zone: str) -> Slice:
    phase = INSTANCE_PHASES.get(instance.status, SlicePhase.FAILED)
    return Slice(name=instance.name, zone=zone, phase=phase, node_state=instance.status,
                 accelerator_type=_short(instance.machine_type),
                 hosts=_hosts(instance) if phase == SlicePhase.READY else (),
                 labels=dict(instance.labels), detail=instance.status_message or "",
                 node_create_time=rfc3339(instance.creation_timestamp), metadata=_metadata(instance))
