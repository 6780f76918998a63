"""Faults of the emulated TPU API: what tests and `tpujob emulator` inject.

Fail-next answers by method (fail_next.py; the server applies them), a random API error rate,
stockouts by zone (and accelerator type), the delay before host keys are published, and the
preemption or death of hosts. A mixin of tpujob.emulator.apis.tpu.nodes.Emulator: it uses the
emulator's lock, nodes, queued resources and operations.
"""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING, cast

from tpujob.emulator.apis.bodies import copy_json
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.fail_next import FaultError, parse
from tpujob.emulator.apis.tpu.parts import EmulatorParts
from tpujob.emulator.apis.tpu.queued_resources import node_names_of

if TYPE_CHECKING:
    from tpujob.emulator.apis.compute.instances import Instance
    from tpujob.emulator.apis.tpu.nodes import Node
    from tpujob.emulator.market import Market


class Faults(EmulatorParts):
    """The fault half of the Emulator (state: api_error_rate, hostkeys_delay, _stockouts,
    injected)."""

    def inject_api_error(self) -> ApiError | None:
        if self.api_error_rate and random.random() < self.api_error_rate:
            if random.random() < 0.5:
                return ApiError(429, "Quota exceeded for quota metric 'Requests' (emulated)")
            return ApiError(503, "The service is currently unavailable (emulated)")
        return None

    def fail_next(self, method: str, status: int, message: str, grpc_status: str | None = None,
                  reason: str | None = None, in_operation: bool = False, times: int = 1,
                  domain: str | None = None, metadata: dict | None = None,
                  quota_violations: list | None = None) -> None:
        """The next `times` calls of `method` (a discovery id) answer this error, or (in_operation)
        succeed and end their operation with it. The server applies it (fail_next.py)."""
        try:
            self.injected.add(parse({"method": method, "status": status, "message": message,
                                     "grpc_status": grpc_status, "reason": reason,
                                     "in_operation": in_operation, "times": times, "domain": domain,
                                     "metadata": metadata, "quota_violations": quota_violations}))
        except FaultError as err:
            raise ApiError(400, str(err)) from None

    def fail_operation(self, parent: str, verb: str, target: str, status: dict) -> dict:
        """An operation that changed nothing and ends with `status` (google.rpc.Status: code,
        message, details) after the provisioning delay, as a create that finds no capacity ends
        (fail-next --in-operation)."""
        with self._lock:
            op = self.operations.new(parent, verb, target)

        def finish() -> None:
            self._sleep(self.provisioning_delay, None)
            with self._lock:
                self.operations.finish(op, error=status)

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
            return {"market": None if self.market is None else self.market.describe(),
                    "apiErrorRate": self.api_error_rate,
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
        down, with the node as it then reads (PREEMPTED, or DELETING).

        A node of a multislice queued resource takes every node of it along: SUSPENDED is "The
        resources specified in the QueuedResource request have been deleted" (tpu.v2 discovery,
        QueuedResourceState), all of them, and Google's multislice introduction restarts every
        slice when one is lost. No page says whether the other slices' hosts get a notice; a
        deleted VM is shut down (its processes get SIGTERM), so here they get the same notice at
        the same moment. This is the one place that choice lives."""
        grace = self.preempt_grace if grace_seconds is None else grace_seconds
        if "/instances/" in node_ref and self.tpu_vms is not None:  # a Compute Spot VM
            return self.tpu_vms.preempt(node_ref, grace)
        with self._lock:
            node = cast("Node", self.find_node(node_ref))  # a TPU node: an instance ref returned above
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
            with self._lock:
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

    def dirty_host(self, node_ref: str, index: int, sticky: bool = False) -> dict:
        """A process on that host holding its accelerator device (machines.SliceMachines.dirty_host)."""
        with self._lock:
            node = self.find_node(node_ref)
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
        with self._lock:
            node = self.find_node(node_ref)
            if not 0 <= index < len(node.hosts):
                raise ApiError(400, f"node {node.node_id} has no host {index}")
            machines = node.machines
        sent = machines.freeze(index, thaw) if machines else 0
        if not sent and not thaw:
            raise ApiError(400, f"no program runs on host {index} of node {node.node_id}",
                           status="FAILED_PRECONDITION")
        return sent

    def _hostkeys_published(self, node: Node | Instance) -> bool:
        if self.hostkeys_delay < 0 or node.booted_at is None:
            return False
        return time.monotonic() - node.booted_at >= self.hostkeys_delay

    def _stocked_out(self, zone: str, accelerator_type: str | None) -> bool:
        market = self.market
        return (zone, None) in self._stockouts or (zone, accelerator_type) in self._stockouts \
            or (market is not None and market.stocked_out(zone, market.now()))

    def set_market(self, market: Market | None, tick: float = 1.0) -> None:
        """Run `market` (market.py) from now, replacing any before; None stops it. A worker
        preempts READY nodes of its zones at their rates, every `tick` wall seconds."""
        with self._lock:
            self.market = market
            self._changed.notify_all()
        if market is not None:
            self._spawn(self._run_market, market, tick)

    def _run_market(self, market: Market, tick: float) -> None:
        while self._sleep(tick, None):
            with self._lock:
                if self.market is not market:
                    return  # replaced or stopped
                t = market.now()
                doomed = [n.name for n in self._nodes.values()
                          if n.body.get("state") == "READY" and not n.preempting and not n.deleting
                          and market.interrupts(n.zone, t, tick * market.speed)]
            for name in doomed:
                self._spawn(self._market_preempt, name)

    def _market_preempt(self, name: str) -> None:
        try:
            self.preempt(name)
        except ApiError:
            pass  # no longer READY (deleted, or preempted meanwhile): nothing to interrupt
