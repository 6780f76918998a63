"""The emulated Cloud TPU v2 API: nodes, queued resources, their operations and life cycles.

Resources are kept as the API's own JSON (camelCase, enum names) so the server returns them as
they are. Every change happens under the world's lock (world.py); time-based transitions run on
its worker threads, one per resource, waiting on its condition so that deletes, stockout changes
and shutdown wake them. What a request may ask: rules.py (nodes), queued_resources.py (queued
resources), node_updates.py (PATCH masks); operations: operations.py; maintenance windows:
maintenance.py. Disks come from the Compute Engine API (apis/compute/api.py), hosts from the
world's machines factory (machines/slice.py).
"""

from __future__ import annotations

import errno
import logging
import pathlib
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tpujob.emulator.addresses import AddressLimit, VirtualHost, external_ip, host_ip
from tpujob.emulator.apis.bodies import authorized_keys, check_id, copy_json, duration_seconds, now
from tpujob.emulator.apis.compute.api import ComputeEmulator
from tpujob.emulator.apis.errors import ABORTED, INTERNAL, RESOURCE_EXHAUSTED, ApiError
from tpujob.emulator.apis.labels import check_tpu_labels
from tpujob.emulator.apis.oslogin import OsLogin, host_login
from tpujob.emulator.apis.tpu.maintenance import upcoming
from tpujob.emulator.apis.tpu.node_updates import DATA_DISKS, apply_documented, mask_paths
from tpujob.emulator.apis.tpu.operations import Operations
from tpujob.emulator.apis.tpu.queued_resources import QueuedResource, check_node_spec, node_names_of
from tpujob.emulator.apis.tpu.rules import (
    TPU_RUNTIME_PORT,
    accelerator_hosts,
    check_placement,
    external_ips_enabled,
    stockout_message,
)
from tpujob.emulator.market import Market
from tpujob.emulator.world import Machines, World, stop_machines

log = logging.getLogger(__name__)

# Address blocks tried when a node's host addresses are taken on the SSH port (_bring_up).
ADDRESS_TRIES = 3


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


class TpuApi:
    """The whole emulated TPU API state. Methods raise ApiError; the server turns it into JSON."""

    def __init__(self, world: World, compute: ComputeEmulator, oslogin: OsLogin):
        self.world = world
        self.compute = compute  # the disks nodes attach
        self.oslogin = oslogin  # `tpujob emulator oslogin`: the hosts' logins, the policy
        self.operations = Operations()
        self._nodes: dict[str, Node] = {}
        self._qrs: dict[str, QueuedResource] = {}

    def fail_operation(self, parent: str, verb: str, target: str, status: dict) -> dict:
        """An operation that changed nothing and ends with `status` (google.rpc.Status: code,
        message, details) after the provisioning delay, as a create that finds no capacity ends
        (fail-next --in-operation)."""
        with self.world.lock:
            op = self.operations.new(parent, verb, target)

        def finish() -> None:
            self.world.sleep(self.world.provisioning_delay, None)
            with self.world.lock:
                self.operations.finish(op, error=status)

        self.world.spawn(finish)
        return op

    # ---- nodes ------------------------------------------------------------------------------

    def create_node(self, parent: str, node_id: str, body: dict) -> dict:
        check_placement(parent.rsplit("/", 1)[1], body)
        self.oslogin.check_node(parent.split("/")[1], body)  # constraints/compute.requireOsLogin
        node = self._new_node(parent, node_id, body, queued_resource=None)
        op = self.operations.new(parent, "create", node.name)
        self.world.spawn(self._provision_node, node, op)
        return op

    def get_node(self, name: str) -> dict:
        with self.world.lock:
            return copy_json(self._node(name).body)

    def list_nodes(self, parent: str) -> list[dict]:
        with self.world.lock:
            return [copy_json(n.body) for n in self._nodes.values() if n.parent == parent]

    def delete_node(self, name: str) -> dict:
        with self.world.lock:
            node = self._node(name)
            op = self.operations.new(node.parent, "delete", name)
            self._start_node_delete(node)
            self.world.spawn(self._finish_when_gone, node, op)
            return op

    def update_node(self, name: str, mask: str, body: dict, api_version: str = "v2") -> dict:
        """PATCH: the documented mask fields (node_updates.py); `data_disks` on v2alpha1 only,
        attaching the disks not attached yet."""
        paths = mask_paths(mask, api_version)
        with self.world.lock:
            node = self._node(name)
            if node.body["state"] == "PREEMPTED":
                # Google refuses to update a preempted node: it must be deleted and re-created
                # (Google's spot/preemptible TPU pages; ray-project/ray#23182: an update of a
                # preempted TPU node failing). FAILED_PRECONDITION: the request is fine, the
                # node's state is not.
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
        with self.world.lock:
            self.operations.finish(op, response=("Node", copy_json(node.body)))
            return self.operations.get(op["name"])

    def _check_disks(self, node_name: str, disks: list[dict], node_body: dict) -> None:
        if disks:
            self.compute.check_types(disks, node_body["acceleratorType"])
            self.compute.attachments(node_name, disks, accelerator_hosts(node_body))
            self.compute.mark_attached(node_name, disks)

    def _expose_disks(self, node: Node, machines: Machines, disks: list[dict]) -> None:
        if not hasattr(machines, "host_pids"):
            return
        num_hosts = accelerator_hosts(node.body)
        self.compute.prepare([machines.host_pids(i) for i in range(num_hosts)],
                             self.compute.attachments(node.name, disks, num_hosts))

    def guest_attributes(self, name: str, query_path: str, worker_ids: list[str]) -> dict:
        namespace, _, key = query_path.strip("/").partition("/")
        with self.world.lock:
            node = self._node(name)
            hosts = [h for h in node.hosts if not worker_ids or str(h.index) in worker_ids]
        answer = []
        # Google writes host keys to guest attributes on the VM's first boot, through its guest
        # agent ("Securely connecting to VM instances", cloud.google.com/solutions/
        # connecting-securely); until the agent has run, or where guest attributes are off, the
        # query answers no items (gcloud then says "Unable to retrieve host keys ... Continuing").
        published = self.world.hostkeys_published(node.booted_at)
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
        with self.world.lock:
            return self.operations.get(name)

    # ---- queued resources ---------------------------------------------------------------------

    def create_queued_resource(self, parent: str, qr_id: str, body: dict,
                               failure: dict | None = None) -> dict:
        check_id(qr_id, "queuedResourceId")
        specs = body.get("tpu", {}).get("nodeSpec", [])
        if len(specs) != 1:
            raise ApiError(400, "tpu.nodeSpec must hold exactly one node spec (several specs in "
                                "one request are not emulated)")
        if "node" not in specs[0]:
            raise ApiError(400, "tpu.nodeSpec[0].node is required")
        node_body = specs[0]["node"]
        check_tpu_labels(node_body.get("labels", {}))
        spec_parent = specs[0].get("parent") or parent
        if not re.fullmatch(r"projects/[^/]+/locations/[^/]+", spec_parent):
            # NodeSpec.parent: "Required. The parent resource name." (tpu.v2 discovery); our wording
            raise ApiError(400, f"tpu.nodeSpec[0].parent {spec_parent!r} is not projects/PROJECT/locations/ZONE")
        check_placement(spec_parent.rsplit("/", 1)[1], node_body)
        check_node_spec(specs[0], qr_id)
        self.oslogin.check_node(parent.split("/")[1], node_body)  # constraints/compute.requireOsLogin
        accelerator_hosts(node_body)
        if node_body.get("dataDisks"):  # a request Google refuses, not queued
            self.compute.check_types(node_body["dataDisks"], node_body["acceleratorType"])
        with self.world.lock:
            name = f"{parent}/queuedResources/{qr_id}"
            if name in self._qrs:
                raise ApiError(409, f"Resource '{name}' already exists")
            for key in ("name", "state", "createTime"):
                body.pop(key, None)
            body.update(name=name, createTime=now())
            qr = QueuedResource(parent, qr_id, body, created=time.monotonic(), failure=failure)
            qr.set_state("ACCEPTED")
            self._qrs[name] = qr
            op = self.operations.new(parent, "create", name)
            # Google finishes the create operation once the request is queued, not once served.
            self.operations.finish(op, response=("QueuedResource", copy_json(qr.body)))
            op = self.operations.get(op["name"])
        self.world.spawn(self._serve_queued_resource, qr)
        return op

    def get_queued_resource(self, name: str) -> dict:
        with self.world.lock:
            return copy_json(self._qr(name).body)

    def list_queued_resources(self, parent: str) -> list[dict]:
        with self.world.lock:
            return [copy_json(q.body) for q in self._qrs.values() if q.parent == parent]

    def delete_queued_resource(self, name: str, force: bool) -> dict:
        with self.world.lock:
            qr = self._qr(name)
            nodes = [n for n in map(self._nodes.get, node_names_of(qr)) if n is not None]
            state = qr.body["state"]["state"]
            if nodes and not force and state not in ("ACCEPTED", "WAITING_FOR_RESOURCES",
                                                     "FAILED", "SUSPENDED"):
                raise ApiError(400, f"Queued resource '{name}' has nodes; delete them first or "
                                    "set force=true", status="FAILED_PRECONDITION")
            op = self.operations.new(qr.parent, "delete", name)
            if not qr.deleting:
                qr.deleting = True
                qr.set_state("DELETING")
                for node in nodes:
                    self._start_node_delete(node)
                self.world.spawn(self._remove_queued_resource, qr, nodes)
            self.world.spawn(self._finish_when_gone, qr, op)
            return op

    # ---- a node's life (worker threads) --------------------------------------------------------

    def _provision_node(self, node: Node, op: dict) -> None:
        if not self.world.sleep(self.world.provisioning_delay, node):
            with self.world.lock:
                return self.operations.finish(op, error=_deleted(node))
        with self.world.lock:
            accel = node.body.get("acceleratorType")
            if self.world.stocked_out(node.zone, accel):
                del self._nodes[node.name]
                self.world.addresses.release(node.ip_block, node.external_block)
                self.compute.release(node.name)
                node.gone = True
                node.hosts = []
                self.operations.finish(op, error=(RESOURCE_EXHAUSTED, stockout_message(node.zone)))
                return
        failure = self._bring_up(node)
        with self.world.lock:
            if failure:
                self.operations.finish(op, error=failure)
            else:
                self.operations.finish(op, response=("Node", copy_json(node.body)))

    def _hosts_root(self, node: Node) -> pathlib.Path:
        """hosts/PROJECT/ZONE/NODE: node names are unique within a project's zone only (two
        projects' stores may each make tpujob-TAG-000001-1 with one tag), and a stopping node's
        machines remove their root."""
        _, project, _, zone = node.parent.split("/")
        return self.world.root / "hosts" / project / zone / node.node_id

    @staticmethod
    def _externals(node: Node, hosts_count: int) -> list[str] | None:
        ext = node.external_block
        return [external_ip(ext, i) for i in range(hosts_count)] if ext is not None else None

    def _bring_up(self, node: Node) -> tuple[int, str] | None:
        """Start the node's hosts, then READY after the provisioning delay; else why not."""
        hosts_count = accelerator_hosts(node.body)
        keys = authorized_keys(node.body.get("metadata", {}))
        machines = None
        if self.world.machines_factory:
            try:
                for tries_left in reversed(range(ADDRESS_TRIES)):
                    machines = self.world.machines_factory(
                        root=self._hosts_root(node), node_id=node.node_id,
                        num_hosts=hosts_count, authorized_keys=keys, ip_block=node.ip_block,
                        ssh_port=self.world.ssh_port, external_ips=self._externals(node, hosts_count), login=host_login(
                            self.oslogin, node.parent.split("/")[1], lambda: node.body.get("metadata", {})))
                    try:
                        hosts = machines.start()
                        break
                    except OSError as err:
                        if err.errno != errno.EADDRINUSE or not tries_left:
                            raise
                        # Another process on this machine holds one of these host addresses
                        # on the SSH port (the port is free only on 127.0.0.1): other addresses,
                        # internal and external both (the error names which one was taken).
                        machines.stop()
                        log.warning("host addresses of %s in use (%s): another block", node.name, err)
                        with self.world.lock:
                            old = node.ip_block, node.external_block
                            node.ip_block = self.world.addresses.take_internal()
                            if node.external_block is not None:
                                node.external_block = self._take_external()
                            self.world.addresses.release(*old)
                assert machines is not None  # made by the loop's first try (ADDRESS_TRIES > 0)
                if hasattr(machines, "hold_apt_lock"):
                    machines.hold_apt_lock(self.world.apt_lock_seconds)  # first boot: apt.py
                self._expose_disks(node, machines, node.body.get("dataDisks", []))
            except Exception as err:  # the node shows the failure, as a broken TPU VM would
                log.exception("starting the hosts of %s failed", node.name)
                if machines:
                    machines.stop()
                with self.world.lock:
                    node.body.update(state="UNKNOWN", healthDescription=f"hosts failed: {err}")
                return (INTERNAL, f"starting the hosts of {node.node_id} failed: {err}")
        else:
            hosts = [VirtualHost(i, host_ip(node.ip_block, i), self.world.ssh_port)
                     for i in range(hosts_count)]
        with self.world.lock:
            # Deleted while its hosts started: the delete found no machines on the node to stop
            # and has dropped the node and its address blocks, so these hosts are stopped here;
            # left running, they held those addresses for the emulator's life, and a later node
            # that drew them could not start (seen in a cold suite run: three tries failed).
            orphaned = node.deleting or self.world.closing
            if not orphaned:
                node.machines, node.hosts = machines, hosts
                node.booted_at = time.monotonic()
                # AccessConfig.externalIp is output only, and there only for workers created with
                # networkConfig.enableExternalIps (tpu.v2 discovery document: AccessConfig,
                # NetworkConfig); a worker without one has no accessConfig to show.
                externals = self._externals(node, hosts_count)
                node.body["networkEndpoints"] = [
                    {"ipAddress": h.ip, "port": TPU_RUNTIME_PORT,
                     **({"accessConfig": {"externalIp": externals[h.index]}} if externals else {})}
                    for h in hosts]
        if orphaned:
            if machines:
                machines.stop()
            return _deleted(node)
        if not self.world.sleep(self.world.provisioning_delay, node):
            return _deleted(node)
        with self.world.lock:
            if node.deleting or self.world.closing:
                return _deleted(node)
            node.body["state"] = "READY"
            node.body["health"] = "HEALTHY"
            self.world.changed.notify_all()
        return None

    def _start_node_delete(self, node: Node) -> None:
        if node.deleting:
            return
        node.deleting = True
        node.body["state"] = "DELETING"
        self.world.changed.notify_all()
        self.world.spawn(self._remove_node, node)

    def _remove_node(self, node: Node) -> None:
        self.world.sleep(self.world.provisioning_delay, None)
        with self.world.lock:
            machines, node.machines = node.machines, None
        if machines:
            machines.stop()
        with self.world.lock:
            self.compute.release(node.name)
            if self._nodes.pop(node.name, None) is not None:
                self.world.addresses.release(node.ip_block, node.external_block)
            node.gone = True
            node.hosts = []
            qr = self._qrs.get(node.body.get("queuedResource", ""))
            state = qr.body["state"] if qr and not qr.deleting else {}
            if qr is not None and state.get("state") in ("ACTIVE", "PROVISIONING"):
                qr.set_state("SUSPENDED", initiator="USER")
            elif qr is not None and state.get("state") == "SUSPENDING":  # the deletion (a preemption) is done
                qr.set_state("SUSPENDED", initiator=state.get("stateInitiator"))
            self.world.changed.notify_all()

    def _finish_when_gone(self, resource: Node | QueuedResource, op: dict) -> None:
        with self.world.lock:
            while not resource.gone and not self.world.closing:
                self.world.changed.wait(0.2)
            if resource.gone:
                self.operations.finish(op, response=("Empty", None))

    # ---- a queued resource's life (worker threads) ---------------------------------------------

    def _serve_queued_resource(self, qr: QueuedResource) -> None:
        if not self.world.sleep(self.world.provisioning_delay, qr):
            return
        with self.world.lock:
            if qr.failure is not None and not (qr.deleting or self.world.closing):
                # A problem found once queued: FAILED by the service, the error in failedData,
                # holding its place (and quota) until deleted (cloud.google.com/tpu/docs/queued-resources).
                qr.set_state("FAILED", initiator="SERVICE")
                qr.body["state"]["failedData"] = {"error": copy_json(qr.failure)}
                self.world.changed.notify_all()
                return
            qr.set_state("WAITING_FOR_RESOURCES")
            spec = qr.body["tpu"]["nodeSpec"][0]
            accel = spec["node"].get("acceleratorType")
            valid = duration_seconds(qr.body.get("queueingPolicy", {}).get("validUntilDuration"))
            while self.world.stocked_out(qr.zone, accel):
                if qr.deleting or self.world.closing:
                    return
                if valid is not None and time.monotonic() - qr.created > valid:
                    qr.set_state("FAILED", initiator="SERVICE")
                    return
                self.world.changed.wait(0.2)
        if not self.world.sleep(self.world.provisioning_delay, qr):
            return
        nodes: list[Node] = []
        with self.world.lock:
            if qr.deleting or self.world.closing:  # deleted between the wait and this lock
                return
            try:
                for node_name in node_names_of(qr):
                    parent, node_id = node_name.split("/nodes/")
                    nodes.append(self._new_node(parent, node_id, copy_json(spec["node"]), queued_resource=qr.name,
                                                multislice="multisliceParams" in spec))
            except ApiError as err:
                for node in nodes:
                    self._start_node_delete(node)
                qr.set_state("FAILED", initiator="SERVICE")
                qr.body["state"]["failedData"] = {"error": {"code": 6, "message": err.message}}
                return
            qr.set_state("PROVISIONING")
        if len(nodes) == 1:
            failures = [self._bring_up(nodes[0])]
        else:  # the slices come up side by side, as one request's
            with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
                failures = list(pool.map(self._bring_up, nodes))
        with self.world.lock:
            if qr.deleting:
                return
            failure = next((f for f in failures if f is not None), None)
            if failure is None and all(n.body["state"] == "READY" for n in nodes):
                qr.set_state("ACTIVE")
            elif failure is not None:  # as Google reports a slice that could not be brought up
                qr.set_state("FAILED", initiator="SERVICE")
                qr.body["state"]["failedData"] = {"error": {"code": failure[0], "message": failure[1]}}

    def _remove_queued_resource(self, qr: QueuedResource, nodes: list[Node]) -> None:
        with self.world.lock:
            while any(not n.gone for n in nodes) and not self.world.closing:
                self.world.changed.wait(0.2)
        self.world.sleep(self.world.provisioning_delay, None)
        with self.world.lock:
            self._qrs.pop(qr.name, None)
            qr.gone = True
            self.world.changed.notify_all()

    # ---- preemption --------------------------------------------------------------------------

    def preempt(self, node_ref: str, grace_seconds: float | None = None) -> dict:
        """SIGTERM on every host, SIGKILL after the grace (default: the emulator's; Google's
        spot notice is 30 s), then the node PREEMPTED, or, for a node of a queued resource, the
        node deleted while its queued resource reads SUSPENDING, then SUSPENDED once the node is
        gone. As on Google, the node reads READY until its hosts are down, so a sweep cannot
        delete it while the program writes its SIGTERM checkpoint. Returns once the hosts are
        down, with the node as it then reads (PREEMPTED, or DELETING).

        A node of a multislice queued resource takes every node of it along: SUSPENDED is "The
        resources specified in the QueuedResource request have been deleted" (tpu.v2 discovery,
        QueuedResourceState), all of them, and Google's multislice introduction restarts every
        slice when one is lost. No page says whether the other slices' hosts get a notice; a
        deleted VM is shut down (its processes get SIGTERM), so here they get the same notice at
        the same moment. This is the one place that choice lives."""
        grace = self.world.preempt_grace if grace_seconds is None else grace_seconds
        with self.world.lock:
            node = self.find_node(node_ref)
            if node.body["state"] != "READY" or node.preempting:
                state = "being preempted" if node.preempting else node.body["state"]
                raise ApiError(400, f"node {node.node_id} is {state}, not READY",
                               status="FAILED_PRECONDITION")
            qr = self._qrs.get(node.body.get("queuedResource", ""))
            group = [node]
            if qr is not None and node.body.get("multisliceNode"):
                group += [other for other in map(self._nodes.get, node_names_of(qr))
                          if other is not None and other is not node and other.body["state"] == "READY"
                          and not other.preempting]
            for member in group:
                member.preempting = True
            machines = [m.machines for m in group if m.machines]
        try:
            threads = [threading.Thread(target=m.preempt, args=(grace,), daemon=True) for m in machines]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            with self.world.lock:
                for member in group:
                    member.preempting = False
                    if member.deleting or member.gone:  # a node deleted in the grace stays deleted
                        continue
                    member.body.pop("health", None)
                    qr = self._qrs.get(member.body.get("queuedResource", ""))
                    if qr and not qr.deleting:
                        # QueuedResourceState.State (tpu.v2 discovery document; Google's queued
                        # resources page): SUSPENDING "the resources ... are being deleted ...
                        # initiated by the user, or the Cloud TPU service", SUSPENDED "have been
                        # deleted". A preempted spot queued resource loses its node.
                        qr.set_state("SUSPENDING", initiator="SERVICE")
                        self._start_node_delete(member)
                    else:
                        member.body["state"] = "PREEMPTED"
                self.world.changed.notify_all()
                body = copy_json(node.body)
        return body

    def set_market(self, market: Market | None, tick: float = 1.0) -> None:
        """Run `market` (market.py) from now, replacing any before; None stops it. A worker
        preempts READY nodes of its zones at their rates, every `tick` wall seconds; the world
        reads its stockouts."""
        with self.world.lock:
            self.world.market = market
            self.world.changed.notify_all()
        if market is not None:
            self.world.spawn(self._run_market, market, tick)

    def _run_market(self, market: Market, tick: float) -> None:
        while self.world.sleep(tick, None):
            with self.world.lock:
                if self.world.market is not market:
                    return  # replaced or stopped
                t = market.now()
                doomed = [n.name for n in self._nodes.values()
                          if n.body.get("state") == "READY" and not n.preempting and not n.deleting
                          and market.interrupts(n.zone, t, tick * market.speed)]
            for name in doomed:
                self.world.spawn(self._market_preempt, name)

    def _market_preempt(self, name: str) -> None:
        try:
            self.preempt(name)
        except ApiError:
            pass  # no longer READY (deleted, or preempted meanwhile): nothing to interrupt

    # ---- maintenance --------------------------------------------------------------------------

    def announce_maintenance(self, node_ref: str, in_seconds: float = 0.0) -> dict:
        """A window `in_seconds` from now (0: unscheduled, starting at once). Returns the node."""
        if in_seconds < 0:
            raise ApiError(400, "inSeconds must be >= 0")
        with self.world.lock:
            node = self.find_node(node_ref)
            if node.body["state"] != "READY":
                raise ApiError(400, f"node {node.node_id} is {node.body['state']}, not READY",
                               status="FAILED_PRECONDITION")
            node.body["upcomingMaintenance"] = upcoming(in_seconds)
            answer = copy_json(node.body)
        self.world.spawn(self._start_maintenance, node, in_seconds)
        return answer

    def _start_maintenance(self, node: Node, in_seconds: float) -> None:
        if not self.world.sleep(in_seconds, node):
            return
        with self.world.lock:
            if node.gone or node.deleting or "upcomingMaintenance" not in node.body:
                return
            node.body["upcomingMaintenance"]["maintenanceStatus"] = "ONGOING"
            node.body["health"] = "UNHEALTHY_MAINTENANCE"
            node.body["healthDescription"] = "The node is under maintenance and will resume once rescheduled."
            machines, node.preempting = node.machines, True
            self.world.changed.notify_all()
        try:
            if machines:
                machines.preempt(self.world.preempt_grace)
        finally:
            with self.world.lock:
                node.preempting = False

    # ---- helpers ------------------------------------------------------------------------------

    def find_node(self, ref: str) -> Node:
        """A node by full name or by bare node id (unique across zones)."""
        with self.world.lock:
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
        """Stop every node's hosts (the world's workers have ended: World.close)."""
        with self.world.lock:
            machines = [n.machines for n in self._nodes.values() if n.machines]
        stop_machines(machines)

    def _new_node(self, parent: str, node_id: str, body: dict, queued_resource: str | None,
                  multislice: bool = False) -> Node:
        check_id(node_id, "nodeId")
        check_tpu_labels(body.get("labels", {}))
        accelerator_hosts(body)
        if not body.get("runtimeVersion"):
            raise ApiError(400, "runtimeVersion is required")
        with self.world.lock:
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
            ip_block = self.world.addresses.take_internal()
            try:
                external_block = self._take_external() if external_ips_enabled(body) else None
            except ApiError:
                self.world.addresses.release(ip_block)
                raise
            node = Node(parent, node_id, body, ip_block=ip_block, external_block=external_block)
            self._nodes[name] = node
            return node

    def _node(self, name: str) -> Node:
        if name not in self._nodes:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self._nodes[name]

    def _qr(self, name: str) -> QueuedResource:
        if name not in self._qrs:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self._qrs[name]

    def _take_external(self) -> int:
        try:
            return self.world.addresses.take_external()
        except AddressLimit as err:  # a limit of the emulator's address plan, not a Google answer
            raise ApiError(400, str(err), status="FAILED_PRECONDITION") from None


def _deleted(node: Node) -> tuple[int, str]:
    return (ABORTED, f"node {node.node_id} was deleted while being created")
