"""Multi-host TPU slices on Compute Engine: a slice of several hosts is three resources, all
named NAME: a regional workload policy (its accelerator topology), a global instance template
(the one-VM body of a single-host slice) and a zonal BULK managed instance group of shape.hosts
VMs (NAME-xxxx) that Compute Engine makes into one ICI slice. Here: their bodies, their
creation, how a MIG reads as a slice, their deletion and their listing for `tpujob gc`.

`MigSlices` is a part of tpujob.cloud.compute_tpu.ComputeTpuCloud, not a client on its own: it
uses that class's clients (`_policies`, `_templates`, `_migs`, `_instances` through
`_tpu_instances`), its request plumbing (`_call`, `_wait`), the one-VM body (`_instance`) and
a VM's host keys (`_vm_host_keys`). Facts and sources: docs/compute-engine.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from google.cloud import compute_v1

from tpujob.cloud.base import Host, Slice, SlicePhase, SliceRequest, TpuResource
from tpujob.cloud.compute import rfc3339, typed_error
from tpujob.cloud.compute_instances import (
    INSTANCE_PHASES,
    STOPPED_STATUSES,
    read_address,
    read_data_disks,
    read_maintenance,
    read_metadata,
    shorten,
)
from tpujob.compute_shapes import compute_shape, multi_host_refusal
from tpujob.errors import ConflictError, NotFoundError, UsageError
from tpujob.names import JOB_LABEL, SLICE_NAME

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


class MigSlices:
    """The multi-host half of ComputeTpuCloud: workload policy, instance template, BULK MIG."""

    if TYPE_CHECKING:  # what ComputeTpuCloud, the class it is mixed into, provides
        _policies: compute_v1.ResourcePoliciesClient
        _templates: compute_v1.InstanceTemplatesClient
        _migs: compute_v1.InstanceGroupManagersClient

        def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
        def _wait(self, operation: str, what: str, create: bool = False, timeout: float = 600.0) -> None: ...
        def _instance(self, request: SliceRequest) -> compute_v1.Instance: ...
        def _tpu_instances(self, project: str, zone: str) -> list[compute_v1.Instance]: ...
        def _vm_host_keys(self, project: str, zone: str, name: str) -> list[str]: ...
        def _preempted(self, project: str, zone: str,
                       instances: Iterable[compute_v1.Instance]) -> frozenset[str]: ...

    # ---- create -----------------------------------------------------------------------------

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

    # ---- read -------------------------------------------------------------------------------

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

    # ---- delete -----------------------------------------------------------------------------

    def _delete_mig(self, project: str, zone: str, name: str, timeout: float) -> None:
        """The MIG (waited for: its VMs go with it), then its template, then its workload
        policy, each missing one skipped."""
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
