"""The life cycle of a TPU API node, on worker threads: provisioning (a stockout ends it),
bringing up its hosts, READY; on delete, stopping its hosts and freeing what it held. A mixin of
tpujob.emulator.apis.tpu.nodes.Emulator: it uses the emulator's lock, nodes, operations and
machines factory.
"""

from __future__ import annotations

import errno
import logging
import pathlib
import time
from typing import TYPE_CHECKING

from tpujob.emulator.addresses import VirtualHost, external_ip, host_ip
from tpujob.emulator.apis.bodies import authorized_keys, copy_json
from tpujob.emulator.apis.errors import ABORTED, INTERNAL, RESOURCE_EXHAUSTED
from tpujob.emulator.apis.oslogin import host_login
from tpujob.emulator.apis.tpu.parts import EmulatorParts
from tpujob.emulator.apis.tpu.rules import TPU_RUNTIME_PORT, accelerator_hosts, stockout_message

if TYPE_CHECKING:
    from tpujob.emulator.apis.tpu.nodes import Node
    from tpujob.emulator.apis.tpu.queued_resources import QueuedResource

log = logging.getLogger(__name__)

# Address blocks tried when a node's host addresses are taken on the SSH port (_bring_up).
ADDRESS_TRIES = 3


class NodeLifecycle(EmulatorParts):
    """Create and delete a node's hosts, each on a worker thread (Emulator._spawn)."""

    def _provision_node(self, node: Node, op: dict) -> None:
        if not self._sleep(self.provisioning_delay, node):
            with self._lock:
                return self.operations.finish(op, error=_deleted(node))
        with self._lock:
            accel = node.body.get("acceleratorType")
            if self._stocked_out(node.zone, accel):
                del self._nodes[node.name]
                if self.compute:
                    self.compute.release(node.name)
                node.gone = True
                node.hosts = []
                self.operations.finish(op, error=(RESOURCE_EXHAUSTED, stockout_message(node.zone)))
                return
        failure = self._bring_up(node)
        with self._lock:
            if failure:
                self.operations.finish(op, error=failure)
            else:
                self.operations.finish(op, response=("Node", copy_json(node.body)))

    def _hosts_root(self, node: Node) -> pathlib.Path:
        """hosts/PROJECT/ZONE/NODE: node names are unique within a project's zone only (two
        projects' stores may each make tpujob-TAG-000001-1 with one tag), and a stopping node's
        machines remove their root."""
        _, project, _, zone = node.parent.split("/")
        return self.root / "hosts" / project / zone / node.node_id

    @staticmethod
    def _externals(node: Node, hosts_count: int) -> list[str] | None:
        ext = node.external_block
        return [external_ip(ext, i) for i in range(hosts_count)] if ext is not None else None

    def _bring_up(self, node: Node) -> tuple[int, str] | None:
        """Start the node's hosts, then READY after the provisioning delay; else why not."""
        hosts_count = accelerator_hosts(node.body)
        keys = authorized_keys(node.body.get("metadata", {}))
        machines = None
        if self._factory:
            try:
                for tries_left in reversed(range(ADDRESS_TRIES)):
                    machines = self._factory(
                        root=self._hosts_root(node), node_id=node.node_id,
                        num_hosts=hosts_count, authorized_keys=keys, ip_block=node.ip_block,
                        ssh_port=self.ssh_port, external_ips=self._externals(node, hosts_count), login=host_login(
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
                        with self._lock:
                            node.ip_block = self._free_ip_block()
                            if node.external_block is not None:
                                node.external_block = self._external_block()
                assert machines is not None  # made by the loop's first try (ADDRESS_TRIES > 0)
                if hasattr(machines, "hold_apt_lock"):
                    machines.hold_apt_lock(self.apt_lock_seconds)  # first boot: apt.py
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
            # Deleted while its hosts started: the delete found no machines on the node to stop
            # and has dropped the node and its address blocks, so these hosts are stopped here;
            # left running, they held those addresses for the emulator's life, and a later node
            # that drew them could not start (seen in a cold suite run: three tries failed).
            orphaned = node.deleting or self._closing
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
        if not self._sleep(self.provisioning_delay, node):
            return _deleted(node)
        with self._lock:
            if node.deleting or self._closing:
                return _deleted(node)
            node.body["state"] = "READY"
            node.body["health"] = "HEALTHY"
            self._changed.notify_all()
        return None

    def _start_node_delete(self, node: Node) -> None:
        if node.deleting:
            return
        node.deleting = True
        node.body["state"] = "DELETING"
        self._changed.notify_all()
        self._spawn(self._remove_node, node)

    def _remove_node(self, node: Node) -> None:
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
            if qr is not None and state.get("state") in ("ACTIVE", "PROVISIONING"):
                qr.set_state("SUSPENDED", initiator="USER")
            elif qr is not None and state.get("state") == "SUSPENDING":  # the deletion (a preemption) is done
                qr.set_state("SUSPENDED", initiator=state.get("stateInitiator"))
            self._changed.notify_all()

    def _finish_when_gone(self, resource: Node | QueuedResource, op: dict) -> None:
        with self._lock:
            while not resource.gone and not self._closing:
                self._changed.wait(0.2)
            if resource.gone:
                self.operations.finish(op, response=("Empty", None))


def _deleted(node: Node) -> tuple[int, str]:
    return (ABORTED, f"node {node.node_id} was deleted while being created")
