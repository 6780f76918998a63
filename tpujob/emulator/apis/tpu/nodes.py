"""The emulated Cloud TPU v2 API: its state, nodes and their life cycle.

Resources are kept as the API's own JSON (camelCase, enum names) so the server returns them as
they are. Every change happens under one lock; time-based transitions run on one worker thread
per resource, waiting on a condition so that deletes, stockout changes and shutdown wake them.
Queued resources: queued_resources.py; injected faults: faults.py; operations: operations.py;
a node's life cycle on its worker threads: node_lifecycle.py.
"""

from __future__ import annotations

import pathlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from tpujob.emulator.addresses import EXTERNAL_BLOCKS, external_ip
from tpujob.emulator.apis.bodies import authorized_keys, check_id, copy_json, now
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.fail_next import FailNext
from tpujob.emulator.apis.host_faults import Faults
from tpujob.emulator.apis.labels import check_tpu_labels
from tpujob.emulator.apis.oslogin import OsLogin
from tpujob.emulator.apis.tpu.maintenance import Maintenance
from tpujob.emulator.apis.tpu.node_lifecycle import NodeLifecycle
from tpujob.emulator.apis.tpu.node_updates import DATA_DISKS, apply_documented, mask_paths
from tpujob.emulator.apis.tpu.operations import Operations
from tpujob.emulator.apis.tpu.queued_resources import QueuedResource, QueuedResources
from tpujob.emulator.apis.tpu.rules import accelerator_hosts, check_placement, external_ips_enabled
from tpujob.emulator.machines.slice import MAX_IP_BLOCK
from tpujob.emulator.market import Market

if TYPE_CHECKING:
    from tpujob.emulator.apis.compute.api import ComputeEmulator
    from tpujob.emulator.apis.compute.instances import Instance
    from tpujob.emulator.apis.compute.tpu_vms import TpuVms

# From SIGTERM to power off of a preempted Spot VM: "30-second warning" (Compute Engine's TPU
# machine page, and Scheduling in compute.v1's discovery document: 30 s for Spot, 120 s for
# Standard; shared/facts/operations.md). The emulator's default preemption grace.
SPOT_NOTICE_SECONDS = 30.0


class Machines(Protocol):
    """What the server needs of tpujob.emulator.machines.slice.SliceMachines (see its contract)."""

    def start(self) -> list: ...
    def preempt(self, grace_seconds: float) -> None: ...
    def kill_host(self, index: int) -> None: ...
    def dirty_host(self, index: int, sticky: bool = False) -> int: ...
    def freeze(self, index: int, thaw: bool = False) -> int: ...
    def stop(self) -> None: ...
    def host_root(self, index: int) -> pathlib.Path: ...
    def ssh_connections(self, index: int) -> dict[str, int]: ...


MachinesFactory = Callable[..., Machines]


def stop_machines(machines: list[Machines]) -> None:
    """Stop each of `machines`, together where their kind can (`stop_many`, as
    SliceMachines.stop_many: one pass for every host, where one per node made closing a few
    hundred nodes outlast `tpujob emulator stop`'s grace)."""
    kinds: dict[type, list[Machines]] = {}
    for m in machines:
        kinds.setdefault(type(m), []).append(m)
    for kind, group in kinds.items():
        together = getattr(kind, "stop_many", None)
        if together is not None:
            together(group)
        else:
            for m in group:
                m.stop()


@dataclass
class Node:
    parent: str
    node_id: str
    body: dict
    hosts: list = field(default_factory=list)
    machines: Machines | None = None
    ip_block: int = 0
    external_block: int | None = None  # its workers' external addresses, when it asked for them
    booted_at: float | None = None  # monotonic time its hosts came up (guest agents start then)
    deleting: bool = False
    gone: bool = False
    preempting: bool = False  # hosts in their SIGTERM grace; the node still reads READY

    @property
    def name(self) -> str:
        return f"{self.parent}/nodes/{self.node_id}"

    @property
    def zone(self) -> str:
        return self.parent.rsplit("/", 1)[1]


class Emulator(QueuedResources, Faults, Maintenance, NodeLifecycle):
    """The whole emulated TPU API state. Methods raise ApiError; the server turns it into JSON."""

    def __init__(self, root: pathlib.Path, provisioning_delay: float = 0.2, ssh_port: int = 22,
                 machines_factory: MachinesFactory | None = None,
                 preempt_grace: float = SPOT_NOTICE_SECONDS):
        self.root = pathlib.Path(root)
        self.provisioning_delay = provisioning_delay
        self.api_error_rate = 0.0
        # Seconds after boot before a node's guest attributes carry its host keys; < 0: never.
        self.hostkeys_delay = 0.0
        self.apt_lock_seconds = 3.0  # a fresh host's dpkg lock held after boot (apt.py; `image`)
        self.ssh_port = ssh_port
        self.preempt_grace = preempt_grace
        self._factory = machines_factory
        self._nodes: dict[str, Node] = {}
        self._qrs: dict[str, QueuedResource] = {}
        self.operations = Operations()
        self._stockouts: set[tuple[str, str | None]] = set()
        self.market: Market | None = None  # a seeded market of capacity and interruptions (market.py)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._closing = False
        self._threads: list[threading.Thread] = []
        self.compute: ComputeEmulator | None = None  # the disks nodes attach (set by the server)
        self.tpu_vms: TpuVms | None = None  # Compute Engine's TPU instances (set by the server)
        self.injected = FailNext()  # fail-next faults, taken by the server before each call
        self.oslogin = OsLogin()  # `tpujob emulator oslogin`: the API, the hosts' logins, the policy

    # ---- the TPU API ------------------------------------------------------------------------

    def create_node(self, parent: str, node_id: str, body: dict) -> dict:
        check_placement(parent.rsplit("/", 1)[1], body)
        self.oslogin.check_node(parent.split("/")[1], body)  # constraints/compute.requireOsLogin
        node = self._new_node(parent, node_id, body, queued_resource=None)
        op = self.operations.new(parent, "create", node.name)
        self._spawn(self._provision_node, node, op)
        return op

    def get_node(self, name: str) -> dict:
        with self._lock:
            return copy_json(self._node(name).body)

    def list_nodes(self, parent: str) -> list[dict]:
        with self._lock:
            return [copy_json(n.body) for n in self._nodes.values() if n.parent == parent]

    def delete_node(self, name: str) -> dict:
        with self._lock:
            node = self._node(name)
            op = self.operations.new(node.parent, "delete", name)
            self._start_node_delete(node)
            self._spawn(self._finish_when_gone, node, op)
            return op

    def update_node(self, name: str, mask: str, body: dict, api_version: str = "v2") -> dict:
        """PATCH: the documented mask fields (node_updates.py); `data_disks` on v2alpha1 only,
        attaching the disks not attached yet."""
        paths = mask_paths(mask, api_version)
        with self._lock:
            node = self._node(name)
            if node.body["state"] == "PREEMPTED":
                # Google refuses to update a preempted node: it must be deleted and re-created
                # (Google's spot/preemptible TPU pages; ray-project/ray#23182: an update of a
                # preempted TPU node failing). FAILED_PRECONDITION: the request is fine, the
                # node's state is not; shared/FACTS.md.
                raise ApiError(400, f"Node {name} is in state PREEMPTED and cannot be updated; "
                                    "delete it and create it again", status="FAILED_PRECONDITION")
            known = {d.get("sourceDisk") for d in node.body.get("dataDisks", [])}
            added = [d for d in body.get("dataDisks", []) if d.get("sourceDisk") not in known] \
                if DATA_DISKS in paths else []
            self._check_disks(name, added, node.body)
            apply_documented(node.body, paths, body)
            node.body["dataDisks"] = node.body.get("dataDisks", []) + added
            machines = node.machines if node.body["state"] == "READY" else None
            op = self.operations.new(node.parent, "update", name)
        if machines:
            self._expose_disks(node, machines, added)
            if "metadata" in paths and hasattr(machines, "authorize"):
                machines.authorize(authorized_keys(node.body.get("metadata", {})))
        with self._lock:
            self.operations.finish(op, response=("Node", copy_json(node.body)))
            return self.operations.get(op["name"])

    def _check_disks(self, node_name: str, disks: list[dict], node_body: dict) -> None:
        if disks:
            if not self.compute:
                raise ApiError(400, "dataDisks need the emulated Compute API")
            self.compute.check_types(disks, node_body["acceleratorType"])
            self.compute.attachments(node_name, disks, accelerator_hosts(node_body))
            self.compute.mark_attached(node_name, disks)

    def _expose_disks(self, node: Node, machines: Machines, disks: list[dict]) -> None:
        if self.compute is None or not hasattr(machines, "host_pids"):
            return
        num_hosts = accelerator_hosts(node.body)
        self.compute.prepare([machines.host_pids(i) for i in range(num_hosts)],
                             self.compute.attachments(node.name, disks, num_hosts))

    def guest_attributes(self, name: str, query_path: str, worker_ids: list[str]) -> dict:
        namespace, _, key = query_path.strip("/").partition("/")
        with self._lock:
            node = self._node(name)
            hosts = [h for h in node.hosts if not worker_ids or str(h.index) in worker_ids]
        answer = []
        # Google writes host keys to guest attributes on the VM's first boot, through its guest
        # agent ("Securely connecting to VM instances", cloud.google.com/solutions/
        # connecting-securely); until the agent has run, or where guest attributes are off, the
        # query answers no items (gcloud then says "Unable to retrieve host keys ... Continuing").
        published = self._hostkeys_published(node)
        for host in hosts:
            items = []
            if host.host_key and published:
                key_type, key_b64 = host.host_key.split()[:2]
                entry = {"namespace": "hostkeys", "key": key_type, "value": key_b64}
                if namespace in ("", "hostkeys") and key in ("", key_type):
                    items.append(entry)
            answer.append({"queryPath": query_path, "queryValue": {"items": items}})
        return {"guestAttributes": answer}

    def get_operation(self, name: str) -> dict:
        with self._lock:
            return self.operations.get(name)

    def hosts(self, node_ref: str) -> list[dict]:
        """Each host's addresses, SSH port and (with machines on) filesystem root and the SSH
        connections it accepted per address, for tests."""
        with self._lock:
            node = self.find_node(node_ref)
            hosts, machines = list(node.hosts), node.machines
        ext = node.external_block
        return [{"index": h.index, "ip": h.ip, "sshPort": h.ssh_port, "hostKey": h.host_key,
                 "externalIp": external_ip(ext, h.index) if ext is not None else None,
                 "root": str(machines.host_root(h.index)) if machines else None,
                 "sshConnections": machines.ssh_connections(h.index) if machines else {}}
                for h in hosts]

    def find_node(self, ref: str) -> Node | Instance:
        """A node by full name or by bare node id (unique across zones); a Compute instance
        by `projects/P/zones/Z/instances/NAME` (the host faults serve both alike)."""
        if "/instances/" in ref and self.tpu_vms is not None:
            return self.tpu_vms.find(ref)
        with self._lock:
            if ref in self._nodes:
                return self._nodes[ref]
            matches = [n for n in self._nodes.values() if n.node_id == ref]
            if not matches:
                raise ApiError(404, f"no node named {ref}")
            if len(matches) > 1:
                raise ApiError(409, f"several nodes are named {ref}; give the full name",
                               status="ABORTED")
            return matches[0]

    def close(self) -> None:
        """Stop every worker and every host machine (the emulator is going away)."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
            machines = [n.machines for n in self._nodes.values() if n.machines]
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)
        stop_machines(machines)
        if self.tpu_vms is not None:
            self.tpu_vms.close()

    # ---- helpers ----------------------------------------------------------------------------

    def _new_node(self, parent: str, node_id: str, body: dict, queued_resource: str | None,
                  multislice: bool = False) -> Node:
        check_id(node_id, "nodeId")
        check_tpu_labels(body.get("labels", {}))
        accelerator_hosts(body)
        if not body.get("runtimeVersion"):
            raise ApiError(400, "runtimeVersion is required")
        with self._lock:
            name = f"{parent}/nodes/{node_id}"
            if name in self._nodes:
                raise ApiError(409, f"Resource '{name}' already exists")
            for key in ("name", "state", "networkEndpoints", "health", "createTime", "id",
                        "healthDescription", "symptoms", "upcomingMaintenance", "queuedResource",
                        "multisliceNode"):  # output only
                body.pop(key, None)
            body.update(name=name, state="CREATING", createTime=now(), apiVersion="V2",
                        id=str(random.randrange(1, 2**62)))
            if queued_resource:
                body["queuedResource"] = queued_resource
            if multislice:  # Node.multisliceNode: "Whether the Node belongs to a Multislice group"
                body["multisliceNode"] = True
            self._check_disks(name, body.get("dataDisks", []), body)
            node = Node(parent, node_id, body, ip_block=self._free_ip_block(),
                         external_block=self._external_block() if external_ips_enabled(body) else None)
            self._nodes[name] = node
            return node

    def _free_ip_block(self) -> int:
        """A host address block no node nor Compute instance (tpu_vms.py) holds."""
        used = {n.ip_block for n in self._nodes.values()}
        if self.tpu_vms is not None:
            used |= self.tpu_vms.blocks()[0]
        # Start from a random block: two emulators on one machine (tests, a user's and CI's)
        # then rarely hand out the same host addresses.
        start = random.randrange(MAX_IP_BLOCK)
        return next(1 + (start + i) % MAX_IP_BLOCK for i in range(MAX_IP_BLOCK)
                    if 1 + (start + i) % MAX_IP_BLOCK not in used)

    def _external_block(self) -> int:
        used = {n.external_block for n in self._nodes.values()}
        if self.tpu_vms is not None:
            used |= self.tpu_vms.blocks()[1]
        start = random.randrange(EXTERNAL_BLOCKS)  # as for ip_block: two emulators rarely meet
        free = next((b for b in ((start + i) % EXTERNAL_BLOCKS for i in range(EXTERNAL_BLOCKS))
                     if b not in used), None)
        if free is None:  # a limit of the emulator's address plan, not a Google answer
            raise ApiError(400, f"emulator limit: at most {EXTERNAL_BLOCKS} nodes with external "
                                "IPs at once", status="FAILED_PRECONDITION")
        return free

    def _node(self, name: str) -> Node:
        if name not in self._nodes:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self._nodes[name]

    def _sleep(self, seconds: float, resource: Node | QueuedResource | Instance | None) -> bool:
        """Wait, waking early on delete or shutdown; False when the resource should stop."""
        deadline = time.monotonic() + seconds
        with self._lock:
            while True:
                if self._closing or (resource is not None and resource.deleting):
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self._changed.wait(left)

    def _spawn(self, target: Callable, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
