"""Single-host TPU VMs as Compute Engine instances: insert, get, list, delete,
getGuestAttributes, their life cycle, preemption and reservations.

Each instance's host is real, as a TPU node's are (machines.SliceMachines with one host, started
through the world's machines factory; without one, a VirtualHost). State changes happen under
the world's lock and wake its condition, so its `sleep` serves instances as it serves nodes; the
operations are Compute's (operations.py). What Google refuses: tpu_vm_rules.py; the
Instance record, its JSON and the list filter: instances.py.

Status sequence (compute.v1.json Instance.status): PROVISIONING, STAGING, RUNNING; a FLEX_START
VM first waits in PENDING ("waiting for available capacity from Dynamic Workload Scheduler") for
the provisioning delay; delete: STOPPING, then gone. The insert operation ends DONE when the VM
is RUNNING, or with its error (stockout, reservation) and no VM left.
"""

from __future__ import annotations

import builtins  # TpuVms.list shadows the builtin in its class body
import logging
import time
from typing import TYPE_CHECKING, Any

from tpujob.emulator.addresses import AddressLimit, VirtualHost, external_ip, host_ip
from tpujob.emulator.apis.bodies import authorized_keys, check_id, copy_json
from tpujob.emulator.apis.compute import vm_disks
from tpujob.emulator.apis.compute.instances import (
    Instance,
    boot_disk_gb,
    guest_attributes_enabled,
    instance_body,
    instance_filter,
    new_fingerprint,
    prepare_vm_hosts,
    stale_fingerprint,
)
from tpujob.emulator.apis.compute.operations import API_ROOT, operation_error
from tpujob.emulator.apis.compute.tpu_vm_rules import (
    OPERATION_ERRORS,
    WORDINGS,
    flex_wait,
    machine_type,
    reservation_name,
    scheduling,
)
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.labels import check_compute_labels
from tpujob.emulator.apis.oslogin import OsLogin, host_login
from tpujob.emulator.apis.tpu.maintenance import upcoming
from tpujob.emulator.world import World, stop_machines

if TYPE_CHECKING:
    from tpujob.emulator.apis.compute.api import ComputeEmulator

log = logging.getLogger(__name__)
# Whether a flex-start BULK MIG's VMs wait in PENDING through a stockout (tpu_migs.py): the
# official reading of PENDING. A lone flex-start VM waits only when its insert asks to
# (tpu_vm_rules.flex_wait: params.requestValidForDuration), else fails as any VM's insert.
FLEX_START_WAITS_OUT_STOCKOUTS = True

# What a Spot VM reads while its hosts are in their preemption grace. No Google page found says;
# a VM being shut down reads STOPPING ("currently stopping (either being deleted or killed)",
# compute.v1.json Instance.status), so that, here, in this one place.
PREEMPTING_STATUS = "STOPPING"


class TpuVms:
    """The instances of every project and zone, and the reservations they may consume."""

    def __init__(self, world: World, compute: ComputeEmulator, oslogin: OsLogin):
        self.world = world
        self.compute = compute  # the data disks VMs attach
        self.oslogin = oslogin
        self.ops = compute.operations
        self._instances: dict[str, Instance] = {}
        self._reservations: dict[tuple[str, str, str], dict] = {}

    # ---- the API ----------------------------------------------------------------------------

    def insert(self, project: str, zone: str, body: dict) -> dict:
        name = body.get("name", "")
        check_id(name, "instance name")
        check_compute_labels(body.get("labels", {}))
        kind = machine_type(zone, body.get("machineType", ""))
        boot_disk_gb(body)
        sched = scheduling(body)
        wait = flex_wait(body) if sched["provisioningModel"] == "FLEX_START" else None
        reservation = reservation_name(body)
        em = self.world
        with em.lock:
            ref = f"projects/{project}/zones/{zone}/instances/{name}"
            if ref in self._instances:
                raise ApiError(409, f"The resource '{ref}' already exists")
            nics = body.get("networkInterfaces") or [{}]
            wants_nat = bool(nics[0].get("accessConfigs"))
            # Its data disks, checked and held before anything is made (vm_disks.py).
            vm_disks.attach(self.compute, [name], project, zone, body.get("disks", []))
            ip_block = em.addresses.take_internal()
            try:
                external_block = em.addresses.take_external() if wants_nat else None
            except AddressLimit as err:  # a limit of the emulator's address plan
                em.addresses.release(ip_block)
                raise ApiError(400, str(err), status="FAILED_PRECONDITION") from None
            inst = Instance(project, zone, name, {}, kind, ip_block, external_block)
            inst.body = instance_body(inst, body, sched, nics)
            self._instances[ref] = inst
            op = self.ops.new(project, zone, "insert", inst.body["selfLink"], done=False)
            em.spawn(self._provision, inst, op, reservation, wait)
            return op

    def get(self, project: str, zone: str, name: str) -> dict:
        with self.world.lock:
            return copy_json(self._instance(project, zone, name).body)

    def list(self, project: str, zone: str, filter_: str = "") -> dict:
        match = instance_filter(filter_)
        with self.world.lock:
            items = [copy_json(i.body) for i in self._instances.values()
                     if (i.project, i.zone) == (project, zone) and match(i.body)]
        return {"kind": "compute#instanceList", "items": sorted(items, key=lambda b: b["name"]),
                "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/instances"}

    def delete(self, project: str, zone: str, name: str) -> dict:
        em = self.world
        with em.lock:
            inst = self._instance(project, zone, name)
            op = self.ops.new(project, zone, "delete", inst.body["selfLink"], done=False)
            if not inst.deleting:
                inst.deleting = True
                inst.body["status"] = "STOPPING"
                em.changed.notify_all()
                em.spawn(self._remove, inst, op)
            else:
                em.spawn(self._finish_when_gone, inst, op)
            return op

    def set_metadata(self, project: str, zone: str, name: str, body: dict) -> dict:
        """instances.setMetadata: the body (a Metadata) replaces the VM's items whole, under
        optimistic locking. Metadata.fingerprint (google-cloud-compute): "The fingerprint is
        initially generated by Compute Engine and changes after every request to modify or
        update metadata. You must always provide an up-to-date fingerprint hash in order to
        update or change metadata, otherwise the request will fail with error 412
        conditionNotMet." A new `ssh-keys` reaches the VM's host as a node's UpdateNode does
        (machines.SliceMachines.authorize: Google's guest agent reads the metadata); a MIG VM's
        reaches its own host only. The template is left alone."""
        em = self.world
        with em.lock:
            inst = self._instance(project, zone, name)
            metadata = inst.body["metadata"]
            if body.get("fingerprint") != metadata["fingerprint"]:
                raise stale_fingerprint()
            inst.body["metadata"] = {"kind": "compute#metadata", "fingerprint": new_fingerprint(),
                                     "items": copy_json(body.get("items", []))}
            keys = authorized_keys({i.get("key"): i.get("value", "") for i in inst.body["metadata"]["items"]})
            machines = inst.machines
            op = self.ops.new(project, zone, "setMetadata", inst.body["selfLink"])
        if machines is not None and hasattr(machines, "authorize"):
            machines.authorize(keys)
        return op

    def guest_attributes(self, project: str, zone: str, name: str, query_path: str) -> dict:
        """GuestAttributes (compute.v1.json): {kind, queryPath, queryValue: {items:
        [{namespace, key, value}]}, selfLink}. The host key appears once the guest agent has
        written it (the world's hostkeys delay, as for nodes), and only on a VM whose
        metadata enables guest attributes (instances.guest_attributes_enabled). Unknown: whether Google
        answers 404 rather than no items before then; no items here, as for TPU nodes."""
        namespace, _, key = query_path.strip("/").partition("/")
        with self.world.lock:
            inst = self._instance(project, zone, name)
            published = self.world.hostkeys_published(inst.booted_at) and guest_attributes_enabled(inst.body)
            items = []
            for host in inst.hosts[:1]:
                if host.host_key and published and namespace in ("", "hostkeys"):
                    key_type, key_b64 = host.host_key.split()[:2]
                    if key in ("", key_type):
                        items.append({"namespace": "hostkeys", "key": key_type, "value": key_b64})
            return {"kind": "compute#guestAttributes", "queryPath": query_path,
                    "queryValue": {"items": items},
                    "selfLink": f"{inst.body['selfLink']}/guestAttributes/{query_path}"}

    # ---- emulator switches ------------------------------------------------------------------

    def reserve(self, project: str, zone: str, name: str, machine: str, count: int) -> dict:
        """A specific reservation of `count` VMs of machine type `machine` (its `inUseCount` is
        what instances consume); count 0 removes it."""
        with self.world.lock:
            key = (project, zone, name)
            if count <= 0:
                self._reservations.pop(key, None)
                return {}
            self._reservations[key] = {"name": name, "zone": zone, "specificReservation": {
                "count": str(count), "inUseCount": "0",
                "instanceProperties": {"machineType": machine}}}
            return copy_json(self._reservations[key])

    def find(self, ref: str) -> Instance:
        with self.world.lock:
            inst = self._instances.get(ref.split("/compute/v1/")[-1])
            if inst is None:
                raise ApiError(404, f"no instance named {ref}")
            return inst

    def named(self, name: str) -> Instance | None:
        """The VM called `name` in any project and zone (the slice name `tpujob show` prints);
        None when there is none, 409 when several are."""
        with self.world.lock:
            found = [i for i in self._instances.values() if i.name == name]
        if len(found) > 1:
            raise ApiError(409, f"several VMs are named {name}; give the full name", status="ABORTED")
        return found[0] if found else None

    def preempt(self, ref: str, grace: float) -> dict:
        """A Spot VM's preemption: its hosts get SIGTERM, SIGKILL after `grace` (Google's notice
        is 30 s: cloud.google.com/compute/docs/tpus/tpu-machines), then the VM is TERMINATED
        (instanceTerminationAction STOP, the default) or deleted (DELETE), as Scheduling in
        compute.v1.json describes. Returns the VM as it then reads ({} once deleted)."""
        em = self.world
        with em.lock:
            inst = self.find(ref)
            if not inst.body["scheduling"].get("preemptible") or inst.body["status"] != "RUNNING" \
                    or inst.preempting:
                raise ApiError(400, f"instance {inst.name} is not a RUNNING Spot VM",
                               status="FAILED_PRECONDITION")
            inst.preempting = True
            inst.body["status"] = PREEMPTING_STATUS
            machines = inst.machines
        if machines:
            machines.preempt(grace)
        with em.lock:
            inst.preempting = False
            if inst.deleting or inst.gone:
                return copy_json(inst.body)
            self._record_preemption(inst)
            inst.hosts = []
            if inst.on_lost is not None:
                inst.on_lost(inst)
            if inst.body["scheduling"].get("instanceTerminationAction") == "DELETE":
                inst.deleting = True
                em.spawn(self._remove, inst, None)
                return {}
            inst.body["status"] = "TERMINATED"
            em.changed.notify_all()
            return copy_json(inst.body)

    def _record_preemption(self, inst: Instance) -> None:
        """A preemption leaves a system operation on the VM, operationType
        `compute.instances.preempted`, DONE, statusMessage "Instance was preempted.": what
        `gcloud compute operations list --filter="operationType=compute.instances.preempted"`
        finds (Google's preemptible-VM page, "detect a preemption"; peers quote the filter and the
        message: a user report). It tells a preemption from any other stop."""
        op = self.ops.new(inst.project, inst.zone, "compute.instances.preempted", inst.body["selfLink"])
        self.ops.annotate(op, statusMessage="Instance was preempted.")

    def stop(self, project: str, zone: str, name: str) -> dict:
        """instances.stop (compute.v1.json): STOPPING, its hosts shut down, then TERMINATED: a
        stop that is no preemption (someone stopped it, or a host error Google did not repair).
        No `compute.instances.preempted` operation is left."""
        em = self.world
        with em.lock:
            inst = self._instance(project, zone, name)
            op = self.ops.new(project, zone, "stop", inst.body["selfLink"], done=False)
            inst.body["status"] = "STOPPING"
            machines, inst.machines, inst.hosts = inst.machines, None, []
            em.changed.notify_all()
        if machines:
            machines.stop()
        with em.lock:
            if not (inst.deleting or inst.gone):
                inst.body["status"] = "TERMINATED"
                if inst.on_lost is not None:
                    inst.on_lost(inst)
            em.changed.notify_all()
        self.ops.finish(op)
        return self.ops.get(project, zone, op["name"])

    def announce_maintenance(self, ref: str, in_seconds: float) -> dict:
        """A Compute Engine TPU VM's maintenance: the same UpcomingMaintenance as a node's
        (maintenance.py), in the Instance's `resourceStatus.upcomingMaintenance`
        (google-cloud-compute ResourceStatus, UpcomingMaintenance: type, canReschedule, window
        times, maintenanceStatus). A TPU VM takes onHostMaintenance TERMINATE only, so when the
        window opens it is stopped (TERMINATED, no preemption recorded), as `stop` does."""
        with self.world.lock:
            inst = self.find(ref)
            if inst.body["status"] != "RUNNING":
                raise ApiError(400, f"instance {inst.name} is {inst.body['status']}, not RUNNING",
                               status="FAILED_PRECONDITION")
            inst.body.setdefault("resourceStatus", {})["upcomingMaintenance"] = upcoming(in_seconds)
            answer = copy_json(inst.body)
        self.world.spawn(self._start_maintenance, inst, in_seconds)
        return answer

    def _start_maintenance(self, inst: Instance, in_seconds: float) -> None:
        if not self.world.sleep(in_seconds, inst):
            return
        with self.world.lock:
            if inst.gone or inst.deleting or inst.body["status"] != "RUNNING":
                return
            inst.body["resourceStatus"]["upcomingMaintenance"]["maintenanceStatus"] = "ONGOING"
        self.stop(inst.project, inst.zone, inst.name)


    def close(self) -> None:
        stop_machines([inst.machines for inst in list(self._instances.values()) if inst.machines])

    # ---- life cycle (worker threads) --------------------------------------------------------

    def _provision(self, inst: Instance, op: dict, reservation: str | None, wait: float | None = None) -> None:
        em = self.world
        with em.lock:
            failure = self._consume(inst, reservation) if reservation else None
        if failure:
            return self._fail(inst, op, failure, reservation=reservation)
        if not em.sleep(em.provisioning_delay, inst):
            return self.ops.finish(op)  # deleted while waiting: the delete takes it from here
        # Flex-start PENDING is "waiting for available capacity from Dynamic Workload Scheduler"
        # (compute.v1 discovery, Instance.status), for as long as the insert's
        # params.requestValidForDuration allows (tpu_vm_rules.flex_wait): a stocked-out zone keeps
        # such a VM waiting until capacity returns, or fails it once its window has passed.
        # Without the window it fails at once, as another VM's insert does.
        deadline = time.monotonic() + wait if wait is not None else None
        while deadline is not None and inst.body["status"] == "PENDING" and time.monotonic() < deadline:
            with em.lock:
                waiting = em.stocked_out(inst.zone, inst.kind.name)
            if not waiting:
                break
            if not em.sleep(min(0.2, max(deadline - time.monotonic(), 0.01)), inst):
                return self.ops.finish(op)
        with em.lock:
            if em.stocked_out(inst.zone, inst.kind.name):
                return self._fail(inst, op, "stockout")
            inst.body["status"] = "STAGING"
        try:
            hosts, machines = self._start_hosts(inst)
        except Exception as err:  # a broken VM: the operation says why
            log.exception("starting the host of %s failed", inst.ref)
            self.drop(inst)
            # INTERNAL_ERROR after STAGING, 503 as users saw a provisioning insert end
            # (dstackai/dstack#488, ray-project/ray#6790: user reports, read as no capacity).
            return self.ops.finish(op, operation_error("INTERNAL_ERROR", str(err), 503))
        with em.lock:
            # Its delete, or the emulator's close, found no machines to stop: stopped here
            # (as TpuApi._bring_up, apis/tpu/api.py, does for a node's hosts).
            orphaned = inst.deleting or em.closing
            if not orphaned:
                inst.hosts, inst.machines, inst.booted_at = hosts, machines, time.monotonic()
        if orphaned:
            if machines:
                machines.stop()
            return self.ops.finish(op)
        if em.sleep(em.provisioning_delay, inst):
            with em.lock:
                if not inst.deleting:
                    inst.body["status"] = "RUNNING"
                    em.changed.notify_all()
        self.ops.finish(op)
        self._limit_run(inst)

    def _limit_run(self, inst: Instance) -> None:
        """A VM with scheduling.maxRunDuration is "automatically terminated (stopped or deleted)
        when it reaches" it, whatever its provisioning model (cloud.google.com/compute/docs/
        instances/limit-vm-runtime), by its instanceTerminationAction: STOP leaves it TERMINATED
        (no preemption recorded), DELETE removes it. Counted from RUNNING, as the page's
        terminationTimestamp is "defined ... whenever a VM has a time limit and enters the RUNNING
        state"."""
        limit = (inst.body["scheduling"].get("maxRunDuration") or {}).get("seconds")
        if not limit or inst.body["status"] != "RUNNING":
            return
        if not self.world.sleep(float(limit), inst):
            return  # deleted (or the emulator closed) first
        with self.world.lock:
            if inst.deleting or inst.gone or inst.body["status"] != "RUNNING":
                return
        if inst.body["scheduling"].get("instanceTerminationAction") == "DELETE":
            self.delete(inst.project, inst.zone, inst.name)
        else:
            self.stop(inst.project, inst.zone, inst.name)

    def _start_hosts(self, inst: Instance) -> tuple[builtins.list[Any], Any]:
        em = self.world
        metadata = lambda: {i.get("key"): i.get("value", "")  # noqa: E731
                            for i in inst.body.get("metadata", {}).get("items", [])}
        externals = [external_ip(inst.external_block, 0)] if inst.external_block is not None \
            else None
        if not em.machines_factory:
            return [VirtualHost(0, host_ip(inst.ip_block, 0), em.ssh_port)], None
        machines = em.machines_factory(
            root=em.root / "instances" / inst.project / inst.zone / inst.name, node_id=inst.name,
            num_hosts=1, authorized_keys=authorized_keys(metadata()), ip_block=inst.ip_block,
            ssh_port=em.ssh_port, external_ips=externals,
            login=host_login(self.oslogin, inst.project, metadata))
        try:
            hosts = machines.start()
            prepare_vm_hosts(self.compute, em.apt_lock_seconds, machines, inst.name, 1,
                             vm_disks.entries(inst.project, inst.zone, inst.body.get("disks", [])))
        except Exception:
            machines.stop()
            raise
        return hosts, machines

    def _remove(self, inst: Instance, op: dict | None) -> None:
        em = self.world
        em.sleep(em.provisioning_delay, None)
        with em.lock:
            machines, inst.machines = inst.machines, None
        if machines:
            machines.stop()
        self.drop(inst)
        if op:
            self.ops.finish(op)

    def _finish_when_gone(self, inst: Instance, op: dict) -> None:
        em = self.world
        with em.lock:
            while not inst.gone and not em.closing:
                em.changed.wait(0.2)
        self.ops.finish(op)

    def _fail(self, inst: Instance, op: dict, why: str, reservation: str | None = None) -> None:
        self.drop(inst)
        code, status = OPERATION_ERRORS[why]
        message = WORDINGS[why].format(name=reservation, project=inst.project, zone=inst.zone)
        self.ops.finish(op, operation_error(code, message, status))

    def add(self, inst: Instance) -> None:
        """Keep `inst`, made by a MIG (tpu_migs.py) with its address block taken."""
        with self.world.lock:
            self._instances[inst.ref] = inst

    def drop(self, inst: Instance) -> None:
        """Forget `inst`: its address block, data disks and reservation are free again."""
        with self.world.lock:
            if self._instances.pop(inst.ref, None) is inst:
                self.world.addresses.release(inst.ip_block, inst.external_block)
            self.compute.release(inst.name)  # its data disks are free again
            if inst.reservation in self._reservations:
                spec = self._reservations[inst.reservation]["specificReservation"]
                spec["inUseCount"] = str(int(spec["inUseCount"]) - 1)
            inst.reservation = None
            inst.gone, inst.hosts = True, []
            self.world.changed.notify_all()

    # ---- helpers ----------------------------------------------------------------------------

    def _consume(self, inst: Instance, ref: str) -> str | None:
        """Take one VM of the reservation `ref` names; None, or why not (OPERATION_ERRORS)."""
        # NAME or projects/P/reservations/NAME (ReservationAffinity.values), either followed by
        # /reservationBlocks/B[/reservationSubBlocks/S]: the reservation is NAME (blocks are not
        # modelled: an emulator limit). A project number stands for the VM's own project (the
        # emulator keeps no numbers apart from ids: an emulator limit).
        parts = ref.split("/")
        project = parts[parts.index("projects") + 1] if "projects" in parts else inst.project
        project = inst.project if project.isdigit() else project
        name = parts[parts.index("reservations") + 1] if "reservations" in parts else parts[0]
        reservation = self._reservations.get((project, inst.zone, name))
        if reservation is None:
            return "no_reservation"
        spec = reservation["specificReservation"]
        wanted = spec["instanceProperties"]["machineType"]
        if wanted != inst.kind.name or int(spec["inUseCount"]) >= int(spec["count"]):
            return "reservation_full"
        spec["inUseCount"] = str(int(spec["inUseCount"]) + 1)
        inst.reservation = (project, inst.zone, name)
        return None

    def _instance(self, project: str, zone: str, name: str) -> Instance:
        ref = f"projects/{project}/zones/{zone}/instances/{name}"
        inst = self._instances.get(ref)
        if inst is None:  # Compute's 404 wording, as for disks (api.py)
            raise ApiError(404, f"The resource '{ref}' was not found")
        return inst
