"""Faults of the emulated hosts, on a TPU node or a Compute Engine VM alike: preemption, a
host's death, a dirty accelerator, a frozen program, a maintenance window; and each host's
addresses for tests. What tests and `tpujob emulator` inject (control.py's endpoints): a node is
named by its id or full name, a VM by its instance resource name or by the slice name `tpujob
show` prints (a VM's or MIG's name; a MIG's VMs are each a host of its slice).
"""

from __future__ import annotations

from tpujob.emulator.addresses import external_ip
from tpujob.emulator.apis.compute.instances import Instance
from tpujob.emulator.apis.compute.tpu_vms import TpuVms
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.tpu.api import Node, TpuApi
from tpujob.emulator.world import World


class HostFaults:
    """The host faults over the TPU API's nodes and Compute Engine's VMs."""

    def __init__(self, world: World, tpu: TpuApi, vms: TpuVms):
        self.world = world
        self.tpu = tpu
        self.vms = vms

    def find(self, ref: str) -> Node | Instance:
        """A node by full name or by bare node id (unique across zones); a Compute instance
        by `projects/P/zones/Z/instances/NAME` or by its bare name, the slice name `tpujob show`
        prints (the host faults serve both alike)."""
        vm = self._vm_ref(ref)
        return self.vms.find(vm) if vm else self.tpu.find_node(ref)

    def _vm_ref(self, ref: str) -> str | None:
        """The instance `ref` names, if it names one: its resource name, or a bare name that is
        no TPU node's and is a VM's (unique across projects and zones); else None."""
        if "/instances/" in ref:
            return ref
        if "/" in ref:
            return None
        try:
            self.tpu.find_node(ref)
            return None
        except ApiError as err:
            if err.code != 404:
                raise
        vm = self.vms.named(ref)
        return vm.ref if vm else None

    def preempt(self, ref: str, grace_seconds: float | None = None) -> dict:
        """A node's preemption (TpuApi.preempt) or a Spot VM's (TpuVms.preempt), SIGKILL after
        `grace_seconds` (default: the world's preemption grace)."""
        grace = self.world.preempt_grace if grace_seconds is None else grace_seconds
        vm = self._vm_ref(ref)
        if vm:  # a Compute Spot VM
            return self.vms.preempt(vm, grace)
        return self.tpu.preempt(ref, grace)

    def announce_maintenance(self, ref: str, in_seconds: float = 0.0) -> dict:
        """A window `in_seconds` from now (0: unscheduled, starting at once) on a node
        (TpuApi.announce_maintenance) or a VM (TpuVms.announce_maintenance). Returns it."""
        if in_seconds < 0:
            raise ApiError(400, "inSeconds must be >= 0")
        vm = self._vm_ref(ref)
        if vm:
            return self.vms.announce_maintenance(vm, in_seconds)
        return self.tpu.announce_maintenance(ref, in_seconds)

    def kill_host(self, node_ref: str, index: int) -> None:
        with self.world.lock:
            node = self.find(node_ref)
            if not 0 <= index < len(node.hosts):
                raise ApiError(400, f"node {node.node_id} has no host {index}")
            machines = node.machines
        if machines:
            machines.kill_host(index)

    def dirty_host(self, node_ref: str, index: int, sticky: bool = False) -> dict:
        """A process on that host holding its accelerator device (machines.SliceMachines.dirty_host)."""
        with self.world.lock:
            node = self.find(node_ref)
            if not 0 <= index < len(node.hosts):
                raise ApiError(400, f"node {node.node_id} has no host {index}")
            if node.body["state"] != "READY" or node.machines is None:
                raise ApiError(400, f"node {node.node_id} has no running hosts", status="FAILED_PRECONDITION")
            machines = node.machines
        try:
            pid = machines.dirty_host(index, sticky)
        except RuntimeError as exc:
            raise ApiError(400, str(exc), status="FAILED_PRECONDITION") from exc
        return {"pid": pid}

    def freeze(self, node_ref: str, index: int, thaw: bool = False) -> int:
        with self.world.lock:
            node = self.find(node_ref)
            if not 0 <= index < len(node.hosts):
                raise ApiError(400, f"node {node.node_id} has no host {index}")
            machines = node.machines
        sent = machines.freeze(index, thaw) if machines else 0
        if not sent and not thaw:
            raise ApiError(400, f"no program runs on host {index} of node {node.node_id}",
                           status="FAILED_PRECONDITION")
        return sent

    def hosts(self, node_ref: str) -> list[dict]:
        """Each host's addresses, SSH port and (with machines on) filesystem root and the SSH
        connections it accepted per address, for tests."""
        with self.world.lock:
            node = self.find(node_ref)
            hosts, machines = list(node.hosts), node.machines
        ext = node.external_block
        return [{"index": h.index, "ip": h.ip, "sshPort": h.ssh_port, "hostKey": h.host_key,
                 "externalIp": external_ip(ext, h.index) if ext is not None else None,
                 "root": str(machines.host_root(h.index)) if machines else None,
                 "sshConnections": machines.ssh_connections(h.index) if machines else {}}
                for h in hosts]
