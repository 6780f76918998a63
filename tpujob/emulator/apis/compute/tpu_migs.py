"""Multi-host TPU slices through Compute Engine: a regional workload policy
(resourcePolicies), a global instance template, and a zonal BULK managed instance group whose
VMs form one ICI slice (one machines.SliceMachines of N hosts, each VM one of them).

Paths and fields: compute.v1.json revision 20261106 (ResourcePolicy.workloadPolicy,
InstanceTemplate.properties, InstanceGroupManager, ManagedInstance, listErrors). Facts and
their sources: cloud.google.com/tpu/docs/tpus-and-migs, Compute Engine's about-bulk-mode page,
and the user reports named where each rule is. What no source says is in
tpu_mig_rules.UNSOURCED; Google's wordings in tpu_mig_rules.MIG_WORDINGS.
"""

from __future__ import annotations

import math
import random
import threading
import time
from typing import TYPE_CHECKING

from tpujob.emulator.addresses import VirtualHost, host_ip
from tpujob.emulator.apis.bodies import authorized_keys, check_id, copy_json, now
from tpujob.emulator.apis.compute import vm_disks
from tpujob.emulator.apis.compute.instances import Instance, instance_body, prepare_vm_hosts
from tpujob.emulator.apis.compute.operations import API_ROOT, operation_error, refusal
from tpujob.emulator.apis.compute.tpu_mig_rules import (
    BULK_MODELS,
    MIG_WORDINGS,
    UNSOURCED,
    MemberMachines,
    members,
    mig_status,
    ref_of,
    topology_of,
    tpu_env,
)
from tpujob.emulator.apis.compute.tpu_vm_rules import WORDINGS, machine_type, scheduling
from tpujob.emulator.apis.compute.tpu_vms import FLEX_START_WAITS_OUT_STOCKOUTS, TpuVms
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.oslogin import host_login
from tpujob.emulator.world import Machines, World, stop_machines

if TYPE_CHECKING:
    from tpujob.emulator.apis.compute.api import ComputeEmulator
    from tpujob.emulator.apis.oslogin import OsLogin


class TpuMigs:
    """Workload policies, instance templates and TPU MIGs; the VMs live in TpuVms."""

    def __init__(self, world: World, vms: TpuVms, compute: ComputeEmulator, oslogin: OsLogin):
        self.world = world
        self.vms = vms  # where the MIGs' VMs live
        self.compute = compute  # the data disks their template names
        self.oslogin = oslogin
        self.ops = compute.operations
        self._policies: dict[str, dict] = {}
        self._templates: dict[str, dict] = {}
        self._migs: dict[str, dict] = {}
        self._slices: dict[str, Machines | None] = {}  # MIG ref -> its hosts (None: hosts off)
        self._lock = threading.RLock()

    # ---- resource policies and templates ----------------------------------------------------

    def insert_policy(self, project: str, region: str, body: dict) -> dict:
        check_id(body.get("name", ""), "resource policy name")
        ref = f"projects/{project}/regions/{region}/resourcePolicies/{body['name']}"
        stored = {**copy_json(body), "kind": "compute#resourcePolicy", "status": "READY",
                  "region": f"{API_ROOT}/projects/{project}/regions/{region}",
                  "selfLink": f"{API_ROOT}/{ref}", "creationTimestamp": now()}
        self._put(self._policies, ref, stored)
        return self.ops.new(project, region, "insert", stored["selfLink"], region=True)

    def get_policy(self, project: str, region: str, name: str) -> dict:
        return self._get(self._policies, f"projects/{project}/regions/{region}/resourcePolicies/{name}")

    def list_policies(self, project: str, region: str) -> dict:
        """resourcePolicies.list (compute.v1.json ResourcePolicyList): every policy, by name."""
        return {"kind": "compute#resourcePolicyList",
                "items": self._list(self._policies, f"projects/{project}/regions/{region}/resourcePolicies/")}

    def delete_policy(self, project: str, region: str, name: str) -> dict:
        ref = f"projects/{project}/regions/{region}/resourcePolicies/{name}"
        self._pop(self._policies, ref)
        return self.ops.new(project, region, "delete", f"{API_ROOT}/{ref}", region=True)

    def insert_template(self, project: str, body: dict) -> dict:
        check_id(body.get("name", ""), "instance template name")
        ref = f"projects/{project}/global/instanceTemplates/{body['name']}"
        for nic in (body.get("properties") or {}).get("networkInterfaces") or []:
            given = nic.get("subnetwork") or ""
            if given and "/subnetworks/" not in given:  # MIG_WORDINGS["subnetwork"]
                raise refusal(400, MIG_WORDINGS["subnetwork"].format(given=given), "invalid")
        # instance-templates create accepts even v5e (xbill9/gemma4-dev HARDWARE.md): the
        # machine type is checked when a MIG makes VMs of it.
        stored = {**copy_json(body), "kind": "compute#instanceTemplate",
                  "selfLink": f"{API_ROOT}/{ref}", "creationTimestamp": now()}
        self._put(self._templates, ref, stored)
        return self.ops.new(project, None, "insert", stored["selfLink"])

    def get_template(self, project: str, name: str) -> dict:
        return self._get(self._templates, f"projects/{project}/global/instanceTemplates/{name}")

    def list_templates(self, project: str) -> dict:
        """instanceTemplates.list (compute.v1.json InstanceTemplateList): global, by name."""
        return {"kind": "compute#instanceTemplateList",
                "items": self._list(self._templates, f"projects/{project}/global/instanceTemplates/")}

    def delete_template(self, project: str, name: str) -> dict:
        ref = f"projects/{project}/global/instanceTemplates/{name}"
        self._pop(self._templates, ref)
        return self.ops.new(project, None, "delete", f"{API_ROOT}/{ref}")

    # ---- managed instance groups ------------------------------------------------------------

    def insert_mig(self, project: str, zone: str, body: dict) -> dict:
        name = body.get("name", "")
        check_id(name, "instance group manager name")
        template = self._get(self._templates, ref_of(body.get("instanceTemplate", "")))
        props = template.get("properties", {})
        kind = machine_type(zone, props.get("machineType", ""))
        model = scheduling(props)["provisioningModel"]
        if (body.get("targetSizePolicy") or {}).get("mode") == "BULK" and model not in BULK_MODELS:
            raise refusal(UNSOURCED["refusal_status"], MIG_WORDINGS["bulk_models"], "invalid")
        policy_ref = (body.get("resourcePolicies") or {}).get("workloadPolicy")
        topology = None
        if policy_ref:
            if "/" not in policy_ref:
                raise refusal(UNSOURCED["refusal_status"], MIG_WORDINGS["malformed"], "invalid")
            topology = self._get(self._policies, ref_of(policy_ref, project)).get(
                "workloadPolicy", {}).get("acceleratorTopology")
        elif kind.name == "tpu7x-standard-4t" and props.get("resourcePolicies"):
            raise refusal(UNSOURCED["refusal_status"], MIG_WORDINGS["placement"], "invalid")
        size = int(body.get("targetSize", 0))
        hosts = size
        if topology:
            if (body.get("targetSizePolicy") or {}).get("mode") != "BULK":
                raise refusal(UNSOURCED["refusal_status"], MIG_WORDINGS["bulk"], "invalid")
            hosts = math.prod(int(d) for d in topology.split("x")) // kind.chips
            if size not in (0, hosts):  # grow only from 0 (about-bulk-mode, facts)
                raise refusal(UNSOURCED["refusal_status"],
                              MIG_WORDINGS["gang"].format(size=size, hosts=hosts), "invalid")
        ref = f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}"
        base = body.get("baseInstanceName") or name
        mig = {**copy_json(body), "kind": "compute#instanceGroupManager", "name": name,
               "id": str(random.randrange(1, 2**62)), "baseInstanceName": base,
               "zone": f"{API_ROOT}/projects/{project}/zones/{zone}", "targetSize": size,
               "selfLink": f"{API_ROOT}/{ref}", "creationTimestamp": now(),
               # A MIG at size 0 has nothing to do: stable, until a resize grows it.
               "status": mig_status(size == 0, topology, "ACTIVATING"),
               "tpujobMembers": members(base, size), "tpujobErrors": [],
               "tpujobHosts": hosts if topology else None}
        self._put(self._migs, ref, mig)
        if size:
            self.world.spawn(self._provision, project, zone, ref, props, kind)
        return self.ops.new(project, zone, "insert", mig["selfLink"])

    def get_mig(self, project: str, zone: str, name: str) -> dict:
        mig = self._get(self._migs, f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
        return {k: v for k, v in mig.items() if not k.startswith("tpujob")}

    def list_migs(self, project: str, zone: str) -> dict:
        prefix = f"projects/{project}/zones/{zone}/instanceGroupManagers/"
        with self._lock:
            names = [r.rsplit("/", 1)[1] for r in self._migs if r.startswith(prefix)]
        return {"kind": "compute#instanceGroupManagerList",
                "items": [self.get_mig(project, zone, n) for n in sorted(names)]}

    def list_managed(self, project: str, zone: str, name: str) -> dict:
        mig = self._get(self._migs, f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
        found = []
        for member in mig["tpujobMembers"]:
            entry = {"name": member, "instance": f"{mig['zone']}/instances/{member}",
                     "currentAction": "CREATING"}
            try:
                vm = self.vms.get(project, zone, member)
                entry.update(id=vm["id"], instanceStatus=vm["status"],
                             currentAction="NONE" if vm["status"] == "RUNNING" else "CREATING")
            except ApiError:
                # A BULK MIG's errors are its bulk operation's (status.bulkInstanceOperation.
                # lastProgressCheck.error): no member's lastAttempt (UNSOURCED["bulk_errors"]).
                if mig["tpujobErrors"] and (mig.get("targetSizePolicy") or {}).get("mode") != "BULK":
                    entry["lastAttempt"] = {"errors": mig["tpujobErrors"][-1]["error"]}
            found.append(entry)
        return {"managedInstances": found}

    def list_errors(self, project: str, zone: str, name: str) -> dict:
        mig = self._get(self._migs, f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
        return {"items": [{"error": e["error"]["errors"][0], "timestamp": e["timestamp"],
                           "instanceActionDetails": {"action": "CREATING",
                                                     "instance": e["instance"]}}
                          for e in mig["tpujobErrors"]]}

    def delete_mig(self, project: str, zone: str, name: str) -> dict:
        ref = f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}"
        mig = self._pop(self._migs, ref)
        with self._lock:
            machines = self._slices.pop(ref, None)
        for member in mig["tpujobMembers"]:
            try:
                inst = self.vms.find(f"projects/{project}/zones/{zone}/instances/{member}")
            except ApiError:
                continue
            inst.machines = None
            self.vms.drop(inst)
        if machines:
            machines.stop()
        return self.ops.new(project, zone, "delete", mig["selfLink"])

    def resize_mig(self, project: str, zone: str, name: str, size: int) -> dict:
        """instanceGroupManagers.resize (POST .../instanceGroupManagers/NAME/resize?size=N, a
        zone operation, compute.v1.json). A BULK TPU MIG grows only from targetSize 0
        (about-bulk-mode, facts; UNSOURCED["grow_from_zero"]) and only to its gang size (the
        insert's rule, MIG_WORDINGS["gang"]); then every VM is made at once, as an insert at
        that size makes them. The operation is DONE at once: "marked DONE when the resize
        actions are scheduled" (compute.v1.json). Shrinking is not served (an emulator limit)."""
        ref = f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}"
        with self._lock:
            self._get(self._migs, ref)  # 404 when there is none
            mig = self._migs[ref]
            current = int(mig["targetSize"])
            if size < 0:
                raise refusal(400, f"Invalid value for field 'size': '{size}'. Must be greater than or "
                                   "equal to 0 (the emulator's words)", "invalid")
            if size == current:
                return self.ops.new(project, zone, "resize", mig["selfLink"])
            if size < current:
                raise ApiError(400, "emulator limit: shrinking a managed instance group is not served")
            if current != 0:
                raise refusal(UNSOURCED["refusal_status"], UNSOURCED["grow_from_zero"], "invalid")
            hosts = mig.get("tpujobHosts")
            if hosts and size != hosts:
                raise refusal(UNSOURCED["refusal_status"],
                              MIG_WORDINGS["gang"].format(size=size, hosts=hosts), "invalid")
            template = self._get(self._templates, ref_of(mig.get("instanceTemplate", "")))
            props = template.get("properties", {})
            kind = machine_type(zone, props.get("machineType", ""))
            base = mig["baseInstanceName"]
            mig.update(targetSize=size, tpujobMembers=members(base, size),
                       status=mig_status(False, topology_of(mig["status"]), "ACTIVATING"))
            self.world.spawn(self._provision, project, zone, ref, props, kind)
            return self.ops.new(project, zone, "resize", mig["selfLink"])

    def refuse_resize_request(self, *args) -> dict:
        raise refusal(UNSOURCED["refusal_status"], MIG_WORDINGS["resize_request"], "invalid")

    def on_member_lost(self, inst: Instance) -> None:
        """A MIG VM's host died (preempted): its slice's topology is no longer whole."""
        with self._lock:
            for mig in self._migs.values():
                if inst.name in mig["tpujobMembers"]:
                    mig["status"] = mig_status(True, topology_of(mig["status"]),
                                            UNSOURCED["topology_after_loss"])

    def close(self) -> None:
        with self._lock:
            slices, self._slices = list(self._slices.values()), {}
        stop_machines([machines for machines in slices if machines])

    # ---- the slice (worker thread) ----------------------------------------------------------

    def _provision(self, project: str, zone: str, ref: str, props: dict, kind) -> None:
        """BULK: every VM at once, retried while the zone is stocked out (ManagedInstance
        currentAction CREATING "retries until success", compute.v1.json), each try's stockout
        in listErrors. A FLEX_START template's VMs are made at once, PENDING, and wait out the
        stockout without an error, as a lone flex-start VM does (UNSOURCED["flex_start_members"])."""
        em = self.world
        flex = FLEX_START_WAITS_OUT_STOCKOUTS and scheduling(props)["provisioningModel"] == "FLEX_START"
        insts = self._make_members(project, zone, ref, props, kind) if flex else []
        if flex and not insts:
            return  # deleted meanwhile
        delay = em.provisioning_delay
        while True:
            if not em.sleep(delay, None):
                return
            delay = max(em.provisioning_delay, 0.1)  # retries: never a busy loop
            with self._lock:
                mig = self._migs.get(ref)
                if mig is None:
                    return
                if not em.stocked_out(zone, kind.name):
                    # Its template's data disks, on every VM or none; a refusal is that try's
                    # error, retried as a stockout is (UNSOURCED["disk_refusal"]).
                    try:
                        disks = vm_disks.attach(self.compute, mig["tpujobMembers"], project, zone,
                                                props.get("disks", []))
                        break
                    except ApiError as exc:
                        reason, message, code = exc.status, exc.message, exc.code
                elif flex:
                    continue
                else:
                    reason, code = "ZONE_RESOURCE_POOL_EXHAUSTED", 503
                    message = WORDINGS["stockout"].format(project=project, zone=zone)
                failure = operation_error(reason, message, code)
                mig["tpujobErrors"].append({**failure, "timestamp": now(),
                                            "instance": f"{mig['zone']}/instances/{mig['tpujobMembers'][0]}"})
                # InstanceGroupManagerStatusBulkInstanceOperation.lastProgressCheck: "Errors
                # encountered during bulk instance operation" (google-cloud-compute), with when.
                mig["status"]["bulkInstanceOperation"]["lastProgressCheck"] = {
                    "error": failure["error"], "timestamp": now()}
        members = mig["tpujobMembers"]
        insts = insts or self._make_members(project, zone, ref, props, kind)
        if not insts:
            return
        block = insts[0].ip_block
        with em.lock:
            for inst in insts:
                inst.body["status"] = "STAGING"
        # The template's metadata reaches every VM (each VM's body carries it, as one
        # instances.insert's does), so its ssh-keys and OS Login let in on every host, as
        # tpu_vms.TpuVms._start_hosts does for a lone VM.
        metadata = lambda: {i.get("key"): i.get("value", "")  # noqa: E731
                            for i in (props.get("metadata") or {}).get("items", [])}
        machines, hosts = None, []
        if em.machines_factory:
            machines = em.machines_factory(root=em.root / "migs" / ref.replace("/", "_"),
                                   node_id=mig["name"], num_hosts=len(members),
                                   authorized_keys=authorized_keys(metadata()), ip_block=block,
                                   ssh_port=em.ssh_port,
                                   login=host_login(self.oslogin, project, metadata))
            hosts = machines.start()
            prepare_vm_hosts(self.compute, em.apt_lock_seconds, machines, mig["name"], len(members), disks)
        else:  # hosts switched off: addresses only, as a lone VM's VirtualHost
            hosts = [VirtualHost(i, host_ip(block, i), em.ssh_port) for i in range(len(members))]
        with self._lock, em.lock:
            if ref not in self._migs:  # deleted meanwhile
                if machines:
                    machines.stop()
                for inst in insts:
                    self.vms.drop(inst)
                return
            self._slices[ref] = machines
            booted = time.monotonic()
            for i, inst in enumerate(insts):
                inst.hosts = [hosts[i]] if hosts else []
                inst.machines = MemberMachines(machines, i) if machines else None
                inst.booted_at = booted  # its host keys publish after the hostkeys delay
                inst.body["status"] = "RUNNING"
            # Every VM runs; the topology is ACTIVATING ("being activated", google-cloud-compute
            # InstanceGroupManagerStatusAcceleratorTopology) a while before it is ACTIVE
            # (UNSOURCED["topology_activation"]).
            mig["status"] = mig_status(True, topology_of(mig["status"]), "ACTIVATING")
            em.changed.notify_all()
        em.spawn(self._activate, ref)

    def _activate(self, ref: str) -> None:
        em = self.world
        em.sleep(em.provisioning_delay * UNSOURCED["topology_activation"], None)
        with self._lock, em.lock:
            mig = self._migs.get(ref)
            if mig is not None and topology_of(mig["status"]) and \
                    mig["status"]["appliedAcceleratorTopologies"][0]["state"] == "ACTIVATING":
                mig["status"] = mig_status(True, topology_of(mig["status"]), "ACTIVE")
            em.changed.notify_all()

    def _make_members(self, project: str, zone: str, ref: str, props: dict, kind) -> list[Instance]:
        """The MIG's VMs, as its template describes them (a FLEX_START one reads PENDING, any
        other PROVISIONING), in one address block; [] when the MIG is gone."""
        em = self.world
        with self._lock, em.lock:
            mig = self._migs.get(ref)
            if mig is None:
                return []
            block = em.addresses.take_internal(holders=len(mig["tpujobMembers"]))  # one block, every VM
            insts = []
            for i, member in enumerate(mig["tpujobMembers"]):
                inst = Instance(project, zone, member, {}, kind, block, None, host_index=i,
                                on_lost=self.on_member_lost)
                nics = props.get("networkInterfaces") or [{}]
                # Each VM's worker id in its `tpu-env` metadata (tpu_mig_rules.tpu_env).
                metadata = dict(props.get("metadata") or {})
                metadata["items"] = [*metadata.get("items", []), {"key": "tpu-env", "value": tpu_env(
                    i, f"{kind.generation}-{kind.chips * len(mig['tpujobMembers'])}", topology_of(mig["status"]))}]
                inst.body = instance_body(inst, {**props, "name": member, "metadata": metadata}, scheduling(props),
                                          [{**nics[0], "accessConfigs": []}])
                self.vms.add(inst)
                insts.append(inst)
            em.changed.notify_all()
            return insts

    # ---- helpers ----------------------------------------------------------------------------

    def _put(self, table: dict, ref: str, body: dict) -> None:
        with self._lock:
            if ref in table:
                raise ApiError(409, f"The resource '{ref}' already exists")
            table[ref] = body

    def _get(self, table: dict, ref: str) -> dict:
        with self._lock:
            if ref not in table:  # Compute's 404 wording (api.py, for disks)
                raise ApiError(404, f"The resource '{ref}' was not found")
            return copy_json(table[ref])

    def _list(self, table: dict, prefix: str) -> list[dict]:
        with self._lock:
            return [copy_json(table[r]) for r in sorted(table) if r.startswith(prefix)]

    def _pop(self, table: dict, ref: str) -> dict:
        with self._lock:
            self._get(table, ref)
            return table.pop(ref)
