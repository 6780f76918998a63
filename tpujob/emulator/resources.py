"""The emulated Cloud TPU v2 resources (nodes, queued resources, operations) and their life cycles.

Resources are kept as the API's own JSON (camelCase, enum names) so the server returns them as
they are. Every change happens under one lock; time-based transitions run on one worker thread
per resource, waiting on a condition so that deletes, stockout changes and shutdown wake them.
"""

from __future__ import annotations

import itertools
import logging
import pathlib
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from tpujob.emulator.failnext import FailNext, FaultError, parse
from tpujob.emulator.machines import MAX_IP_BLOCK
from tpujob.emulator.payloads import (ABORTED, EXTERNAL_BLOCKS, INTERNAL, RESOURCE_EXHAUSTED,
                                      TPU_RUNTIME_PORT, ApiError, VirtualHost, accelerator_hosts,
                                      authorized_keys, check_id, check_placement, copy_json, duration_seconds,
                                      external_ip, external_ips_enabled, host_ip, now,
                                      stockout_message)

log = logging.getLogger(__name__)



class Machines(Protocol):
    """What the server needs of tpujob.emulator.machines.SliceMachines (see its contract)."""

    def start(self) -> list: ...
    def preempt(self, grace_seconds: float) -> None: ...
    def kill_host(self, index: int) -> None: ...
    def stop(self) -> None: ...
    def host_root(self, index: int) -> pathlib.Path: ...
    def ssh_connections(self, index: int) -> dict[str, int]: ...


MachinesFactory = Callable[..., Machines]


@dataclass
class _Node:
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


@dataclass
class _QueuedResource:
    parent: str
    qr_id: str
    body: dict
    created: float
    deleting: bool = False
    gone: bool = False

    @property
    def name(self) -> str:
        return f"{self.parent}/queuedResources/{self.qr_id}"

    @property
    def zone(self) -> str:
        return self.parent.rsplit("/", 1)[1]

    def set_state(self, state: str, initiator: str | None = None) -> None:
        self.body["state"] = {"state": state}
        if initiator:
            self.body["state"]["stateInitiator"] = initiator


class Emulator:
    """The whole emulated TPU API state. Methods raise ApiError; the server turns it into JSON."""

    def __init__(self, root: pathlib.Path, provisioning_delay: float = 0.2, ssh_port: int = 22,
                 machines_factory: MachinesFactory | None = None, preempt_grace: float = 5.0):
        self.root = pathlib.Path(root)
        self.provisioning_delay = provisioning_delay
        self.api_error_rate = 0.0
        # Seconds after boot before a node's guest attributes carry its host keys; < 0: never.
        self.hostkeys_delay = 0.0
        self.ssh_port = ssh_port
        self.preempt_grace = preempt_grace
        self._factory = machines_factory
        self._nodes: dict[str, _Node] = {}
        self._qrs: dict[str, _QueuedResource] = {}
        self._ops: dict[str, dict] = {}
        self._stockouts: set[tuple[str, str | None]] = set()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._closing = False
        self._ids = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self.compute = None  # tpujob.emulator.compute.ComputeEmulator: the disks nodes attach
        self.injected = FailNext()  # fail-next faults, taken by the server before each call

    # ---- the TPU API ------------------------------------------------------------------------

    def create_node(self, parent: str, node_id: str, body: dict) -> dict:
        check_placement(parent.rsplit("/", 1)[1], body)
        node = self._new_node(parent, node_id, body, queued_resource=None)
        op = self._new_op(parent, "create", node.name)
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
            op = self._new_op(node.parent, "delete", name)
            self._start_node_delete(node)
            self._spawn(self._finish_when_gone, node, op)
            return op

    def update_node(self, name: str, mask: str, body: dict) -> dict:
        """PATCH with updateMask=dataDisks: attach the disks not attached yet (others: 400)."""
        if mask != "dataDisks":
            raise ApiError(400, f"updateMask {mask!r} is not emulated (only dataDisks)")
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
            added = [d for d in body.get("dataDisks", []) if d.get("sourceDisk") not in known]
            self._check_disks(name, added, node.body)
            node.body["dataDisks"] = node.body.get("dataDisks", []) + added
            machines = node.machines if node.body["state"] == "READY" else None
            op = self._new_op(node.parent, "update", name)
        if machines:
            self._expose_disks(node, machines, added)
        with self._lock:
            self._finish_op(op, response=("Node", copy_json(node.body)))
            return copy_json(self._ops[op["name"]])

    def _check_disks(self, node_name: str, disks: list[dict], node_body: dict) -> None:
        if disks:
            if not self.compute:
                raise ApiError(400, "dataDisks need the emulated Compute API")
            self.compute.check_types(disks, node_body["acceleratorType"])
            self.compute.attachments(node_name, disks, accelerator_hosts(node_body))
            self.compute.mark_attached(node_name, disks)

    def _expose_disks(self, node: _Node, machines: Machines, disks: list[dict]) -> None:
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

    def create_queued_resource(self, parent: str, qr_id: str, body: dict) -> dict:
        check_id(qr_id, "queuedResourceId")
        specs = body.get("tpu", {}).get("nodeSpec", [])
        if len(specs) != 1 or not specs[0].get("nodeId"):
            raise ApiError(400, "tpu.nodeSpec must hold exactly one node with a nodeId "
                                "(multislice requests are not emulated)")
        if "node" not in specs[0]:
            raise ApiError(400, "tpu.nodeSpec[0].node is required")
        node_body = specs[0]["node"]
        check_placement((specs[0].get("parent") or parent).rsplit("/", 1)[1], node_body)
        accelerator_hosts(node_body)
        if self.compute and node_body.get("dataDisks"):  # a request Google refuses, not queued
            self.compute.check_types(node_body["dataDisks"], node_body["acceleratorType"])
        with self._lock:
            name = f"{parent}/queuedResources/{qr_id}"
            if name in self._qrs:
                raise ApiError(409, f"Resource '{name}' already exists")
            for key in ("name", "state", "createTime"):
                body.pop(key, None)
            body.update(name=name, createTime=now())
            qr = _QueuedResource(parent, qr_id, body, created=time.monotonic())
            qr.set_state("ACCEPTED")
            self._qrs[name] = qr
            op = self._new_op(parent, "create", name)
            # Google finishes the create operation once the request is queued, not once served.
            self._finish_op(op, response=("QueuedResource", copy_json(qr.body)))
            op = copy_json(self._ops[op["name"]])
        self._spawn(self._serve_queued_resource, qr)
        return op

    def get_queued_resource(self, name: str) -> dict:
        with self._lock:
            return copy_json(self._qr(name).body)

    def list_queued_resources(self, parent: str) -> list[dict]:
        with self._lock:
            return [copy_json(q.body) for q in self._qrs.values() if q.parent == parent]

    def delete_queued_resource(self, name: str, force: bool) -> dict:
        with self._lock:
            qr = self._qr(name)
            node = self._nodes.get(self._node_name_of(qr))
            state = qr.body["state"]["state"]
            if node and not force and state not in ("ACCEPTED", "WAITING_FOR_RESOURCES",
                                                    "FAILED", "SUSPENDED"):
                raise ApiError(400, f"Queued resource '{name}' has nodes; delete them first or "
                                    "set force=true", status="FAILED_PRECONDITION")
            op = self._new_op(qr.parent, "delete", name)
            if not qr.deleting:
                qr.deleting = True
                qr.set_state("DELETING")
                if node:
                    self._start_node_delete(node)
                self._spawn(self._remove_queued_resource, qr, node)
            self._spawn(self._finish_when_gone, qr, op)
            return op

    def get_operation(self, name: str) -> dict:
        with self._lock:
            if name not in self._ops:
                raise ApiError(404, f"Operation '{name}' was not found")
            return copy_json(self._ops[name])

    # ---- faults -----------------------------------------------------------------------------

    def inject_api_error(self) -> ApiError | None:
        if self.api_error_rate and random.random() < self.api_error_rate:
            if random.random() < 0.5:
                return ApiError(429, "Quota exceeded for quota metric 'Requests' (emulated)")
            return ApiError(503, "The service is currently unavailable (emulated)")
        return None

    def fail_next(self, method: str, status: int, message: str, grpc_status: str | None = None,
                  reason: str | None = None, in_operation: bool = False, times: int = 1) -> None:
        """The next `times` calls of `method` (a discovery id) answer this error, or (in_operation)
        succeed and end their operation with it. The server applies it (failnext.py)."""
        try:
            self.injected.add(parse({"method": method, "status": status, "message": message,
                                     "grpc_status": grpc_status, "reason": reason,
                                     "in_operation": in_operation, "times": times}))
        except FaultError as err:
            raise ApiError(400, str(err)) from None

    def fail_operation(self, parent: str, verb: str, target: str, code: int, message: str) -> dict:
        """An operation that changed nothing and ends with `code` after the provisioning delay,
        as a create that finds no capacity ends (fail-next --in-operation)."""
        with self._lock:
            op = self._new_op(parent, verb, target)

        def finish() -> None:
            self._sleep(self.provisioning_delay, None)
            with self._lock:
                self._finish_op(op, error=(code, message))

        self._spawn(finish)
        return op

    def set_faults(self, api_error_rate: float | None, provisioning_delay: float | None,
                   hostkeys_delay: float | None = None) -> None:
        with self._lock:
            if hostkeys_delay is not None:
                self.hostkeys_delay = hostkeys_delay
            if api_error_rate is not None:
                if not 0 <= api_error_rate <= 1:
                    raise ApiError(400, "apiErrorRate must be between 0 and 1")
                self.api_error_rate = api_error_rate
            if provisioning_delay is not None:
                if provisioning_delay < 0:
                    raise ApiError(400, "provisioningDelay must not be negative")
                self.provisioning_delay = provisioning_delay

    def stockout(self, zone: str, accelerator_type: str | None, clear: bool) -> None:
        with self._lock:
            if clear:
                self._stockouts.discard((zone, accelerator_type))
            else:
                self._stockouts.add((zone, accelerator_type))
            self._changed.notify_all()

    def faults(self) -> dict:
        with self._lock:
            return {"apiErrorRate": self.api_error_rate,
                    "provisioningDelay": self.provisioning_delay,
                    "hostkeysDelay": self.hostkeys_delay,
                    "stockouts": [{"zone": z, "acceleratorType": a}
                                  for z, a in sorted(self._stockouts, key=str)]}

    def preempt(self, node_ref: str, grace_seconds: float | None = None) -> dict:
        """SIGTERM on every host, SIGKILL after the grace (default: the emulator's; Google's
        spot notice is 30 s), then the node PREEMPTED, or, for a node of a queued resource, the
        node deleted while its queued resource reads SUSPENDING, then SUSPENDED once the node is
        gone. As on Google, the node reads READY until its hosts are down, so a sweep cannot
        delete it while the program writes its SIGTERM checkpoint. Returns once the hosts are
        down, with the node as it then reads (PREEMPTED, or DELETING)."""
        grace = self.preempt_grace if grace_seconds is None else grace_seconds
        with self._lock:
            node = self.find_node(node_ref)
            if node.body["state"] != "READY" or node.preempting:
                state = "being preempted" if node.preempting else node.body["state"]
                raise ApiError(400, f"node {node.node_id} is {state}, not READY",
                               status="FAILED_PRECONDITION")
            node.preempting = True
            machines = node.machines
        try:
            if machines:
                machines.preempt(grace)
        finally:
            with self._lock:
                node.preempting = False
                if not node.deleting and not node.gone:  # a node deleted in the grace stays deleted
                    node.body.pop("health", None)
                    qr = self._qrs.get(node.body.get("queuedResource", ""))
                    if qr and not qr.deleting:
                        # QueuedResourceState.State (tpu.v2 discovery document; Google's queued
                        # resources page): SUSPENDING "the resources ... are being deleted ...
                        # initiated by the user, or the Cloud TPU service", SUSPENDED "have been
                        # deleted". A preempted spot queued resource loses its node.
                        qr.set_state("SUSPENDING", initiator="SERVICE")
                        self._start_node_delete(node)
                    else:
                        node.body["state"] = "PREEMPTED"
                self._changed.notify_all()
                body = copy_json(node.body)
        return body

    def kill_host(self, node_ref: str, index: int) -> None:
        with self._lock:
            node = self.find_node(node_ref)
            if not 0 <= index < len(node.hosts):
                raise ApiError(400, f"node {node.node_id} has no host {index}")
            machines = node.machines
        if machines:
            machines.kill_host(index)

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

    def find_node(self, ref: str) -> _Node:
        """A node by full name or by bare node id (unique across zones)."""
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
        for m in machines:
            m.stop()

    # ---- life cycles (worker threads) --------------------------------------------------------

    def _provision_node(self, node: _Node, op: dict) -> None:
        if not self._sleep(self.provisioning_delay, node):
            with self._lock:
                return self._finish_op(op, error=_deleted(node))
        with self._lock:
            accel = node.body.get("acceleratorType")
            if self._stocked_out(node.zone, accel):
                del self._nodes[node.name]
                if self.compute:
                    self.compute.release(node.name)
                node.gone = True
                node.hosts = []
                self._finish_op(op, error=(RESOURCE_EXHAUSTED, stockout_message(node.zone)))
                return
        failure = self._bring_up(node)
        with self._lock:
            if failure:
                self._finish_op(op, error=failure)
            else:
                self._finish_op(op, response=("Node", copy_json(node.body)))

    def _serve_queued_resource(self, qr: _QueuedResource) -> None:
        if not self._sleep(self.provisioning_delay, qr):
            return
        with self._lock:
            qr.set_state("WAITING_FOR_RESOURCES")
            spec = qr.body["tpu"]["nodeSpec"][0]
            accel = spec["node"].get("acceleratorType")
            valid = duration_seconds(qr.body.get("queueingPolicy", {}).get("validUntilDuration"))
            while self._stocked_out(qr.zone, accel):
                if qr.deleting or self._closing:
                    return
                if valid is not None and time.monotonic() - qr.created > valid:
                    qr.set_state("FAILED", initiator="SERVICE")
                    return
                self._changed.wait(0.2)
        if not self._sleep(self.provisioning_delay, qr):
            return
        with self._lock:
            if qr.deleting or self._closing:  # deleted between the wait and this lock
                return
            try:
                node = self._new_node(spec.get("parent") or qr.parent, spec["nodeId"],
                                      copy_json(spec["node"]), queued_resource=qr.name)
            except ApiError as err:
                qr.set_state("FAILED", initiator="SERVICE")
                qr.body["state"]["failedData"] = {"error": {"code": 6, "message": err.message}}
                return
            qr.set_state("PROVISIONING")
        failure = self._bring_up(node)
        with self._lock:
            if qr.deleting:
                return
            if failure is None and node.body["state"] == "READY":
                qr.set_state("ACTIVE")
            elif failure is not None:  # as Google reports a slice that could not be brought up
                qr.set_state("FAILED", initiator="SERVICE")
                qr.body["state"]["failedData"] = {"error": {"code": failure[0], "message": failure[1]}}

    def _bring_up(self, node: _Node) -> tuple[int, str] | None:
        """Start the node's hosts, then READY after the provisioning delay; else why not."""
        hosts_count = accelerator_hosts(node.body)
        keys = authorized_keys(node.body.get("metadata", {}))
        ext = node.external_block
        externals = [external_ip(ext, i) for i in range(hosts_count)] if ext is not None else None
        machines = None
        if self._factory:
            try:
                machines = self._factory(
                    root=self.root / "hosts" / node.node_id, node_id=node.node_id,
                    num_hosts=hosts_count, authorized_keys=keys, ip_block=node.ip_block,
                    ssh_port=self.ssh_port, external_ips=externals)
                hosts = machines.start()
                self._expose_disks(node, machines, node.body.get("dataDisks", []))
            except Exception as err:  # the node shows the failure, as a broken TPU VM would
                log.exception("starting the hosts of %s failed", node.name)
                if machines:
                    machines.stop()
                with self._lock:
                    node.body.update(state="UNKNOWN", healthDescription=f"hosts failed: {err}")
                return (INTERNAL, f"starting the hosts of {node.node_id} failed: {err}")
        else:
            hosts = [VirtualHost(i, host_ip(node.ip_block, i), self.ssh_port)
                     for i in range(hosts_count)]
        with self._lock:
            node.machines, node.hosts = machines, hosts
            node.booted_at = time.monotonic()
            # AccessConfig.externalIp is output only, and there only for workers created with
            # networkConfig.enableExternalIps (tpu.v2 discovery document: AccessConfig,
            # NetworkConfig); a worker without one has no accessConfig to show.
            node.body["networkEndpoints"] = [
                {"ipAddress": h.ip, "port": TPU_RUNTIME_PORT,
                 **({"accessConfig": {"externalIp": externals[h.index]}} if externals else {})}
                for h in hosts]
        if not self._sleep(self.provisioning_delay, node):
            return _deleted(node)
        with self._lock:
            if node.deleting or self._closing:
                return _deleted(node)
            node.body["state"] = "READY"
            node.body["health"] = "HEALTHY"
            self._changed.notify_all()
        return None

    def _start_node_delete(self, node: _Node) -> None:
        if node.deleting:
            return
        node.deleting = True
        node.body["state"] = "DELETING"
        self._changed.notify_all()
        self._spawn(self._remove_node, node)

    def _remove_node(self, node: _Node) -> None:
        self._sleep(self.provisioning_delay, None)
        with self._lock:
            machines, node.machines = node.machines, None
        if machines:
            machines.stop()
        with self._lock:
            if self.compute:
                self.compute.release(node.name)
            self._nodes.pop(node.name, None)
            node.gone = True
            node.hosts = []
            qr = self._qrs.get(node.body.get("queuedResource", ""))
            state = qr.body["state"] if qr and not qr.deleting else {}
            if state.get("state") in ("ACTIVE", "PROVISIONING"):
                qr.set_state("SUSPENDED", initiator="USER")
            elif state.get("state") == "SUSPENDING":  # the service's deletion (a preemption) is done
                qr.set_state("SUSPENDED", initiator=state.get("stateInitiator"))
            self._changed.notify_all()

    def _remove_queued_resource(self, qr: _QueuedResource, node: _Node | None) -> None:
        with self._lock:
            while node is not None and not node.gone and not self._closing:
                self._changed.wait(0.2)
        self._sleep(self.provisioning_delay, None)
        with self._lock:
            self._qrs.pop(qr.name, None)
            qr.gone = True
            self._changed.notify_all()

    def _finish_when_gone(self, resource: _Node | _QueuedResource, op: dict) -> None:
        with self._lock:
            while not resource.gone and not self._closing:
                self._changed.wait(0.2)
            if resource.gone:
                self._finish_op(op, response=("Empty", None))

    # ---- helpers ----------------------------------------------------------------------------

    def _new_node(self, parent: str, node_id: str, body: dict, queued_resource: str | None
                  ) -> _Node:
        check_id(node_id, "nodeId")
        accelerator_hosts(body)
        if not body.get("runtimeVersion"):
            raise ApiError(400, "runtimeVersion is required")
        with self._lock:
            name = f"{parent}/nodes/{node_id}"
            if name in self._nodes:
                raise ApiError(409, f"Resource '{name}' already exists")
            for key in ("name", "state", "networkEndpoints", "health", "createTime", "id"):
                body.pop(key, None)
            body.update(name=name, state="CREATING", createTime=now(), apiVersion="V2",
                        id=str(random.randrange(1, 2**62)))
            if queued_resource:
                body["queuedResource"] = queued_resource
            self._check_disks(name, body.get("dataDisks", []), body)
            used = {n.ip_block for n in self._nodes.values()}
            # Start from a random block: two emulators on one machine (tests, a user's and CI's)
            # then rarely hand out the same host addresses.
            start = random.randrange(MAX_IP_BLOCK)
            block = next(1 + (start + i) % MAX_IP_BLOCK for i in range(MAX_IP_BLOCK)
                         if 1 + (start + i) % MAX_IP_BLOCK not in used)
            node = _Node(parent, node_id, body, ip_block=block,
                         external_block=self._external_block() if external_ips_enabled(body) else None)
            self._nodes[name] = node
            return node

    def _external_block(self) -> int:
        used = {n.external_block for n in self._nodes.values()}
        start = random.randrange(EXTERNAL_BLOCKS)  # as for ip_block: two emulators rarely meet
        free = next((b for b in ((start + i) % EXTERNAL_BLOCKS for i in range(EXTERNAL_BLOCKS))
                     if b not in used), None)
        if free is None:  # a limit of the emulator's address plan, not a Google answer
            raise ApiError(400, f"emulator limit: at most {EXTERNAL_BLOCKS} nodes with external "
                                "IPs at once", status="FAILED_PRECONDITION")
        return free

    def _hostkeys_published(self, node: _Node) -> bool:
        if self.hostkeys_delay < 0 or node.booted_at is None:
            return False
        return time.monotonic() - node.booted_at >= self.hostkeys_delay

    def _node(self, name: str) -> _Node:
        if name not in self._nodes:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self._nodes[name]

    def _qr(self, name: str) -> _QueuedResource:
        if name not in self._qrs:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self._qrs[name]

    def _node_name_of(self, qr: _QueuedResource) -> str:
        spec = qr.body["tpu"]["nodeSpec"][0]
        return f"{spec.get('parent') or qr.parent}/nodes/{spec['nodeId']}"

    def _stocked_out(self, zone: str, accelerator_type: str | None) -> bool:
        return (zone, None) in self._stockouts or (zone, accelerator_type) in self._stockouts

    def _new_op(self, parent: str, verb: str, target: str) -> dict:
        name = f"{parent}/operations/operation-{next(self._ids)}-{uuid.uuid4().hex[:12]}"
        op = {"name": name, "done": False,
              "metadata": {"@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                           "createTime": now(), "target": target, "verb": verb,
                           "apiVersion": "v2"}}
        self._ops[name] = op
        return copy_json(op)

    def _finish_op(self, op: dict, response: tuple[str, Any] | None = None,
                   error: tuple[int, str] | None = None) -> None:
        stored = self._ops[op["name"]]
        stored["done"] = True
        stored["metadata"]["endTime"] = now()
        if error:
            stored["error"] = {"code": error[0], "message": error[1]}
        else:
            kind, body = response
            package = "google.protobuf" if kind == "Empty" else "google.cloud.tpu.v2"
            stored["response"] = {"@type": f"type.googleapis.com/{package}.{kind}", **(body or {})}

    def _sleep(self, seconds: float, resource: _Node | _QueuedResource | None) -> bool:
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


def _deleted(node: _Node) -> tuple[int, str]:
    return (ABORTED, f"node {node.node_id} was deleted while being created")
