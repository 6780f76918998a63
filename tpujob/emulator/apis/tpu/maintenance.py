"""Maintenance of an emulated TPU node: `tpujob emulator maintenance NODE [--in SECONDS]`.

The node announces it as Google's API shapes it (tpu.v2.json, revision 20261001, `Node`):
- `upcomingMaintenance` (UpcomingMaintenance): `type` SCHEDULED (announced ahead) or
  UNSCHEDULED (at once), `canReschedule`, `windowStartTime`, `windowEndTime`,
  `latestWindowStartTime` (RFC 3339), `maintenanceStatus` PENDING ("There is pending
  maintenance") then ONGOING ("There is ongoing maintenance on this VM");
- `health` UNHEALTHY_MAINTENANCE ("The node is under maintenance/priority boost caused
  rescheduling and will resume running once rescheduled") once the window starts, with
  `healthDescription` ("If this field is populated, it contains a description of why the TPU
  Node is unhealthy"; Google's wording of it for maintenance was not found: ours).
When the window starts the hosts go down as in a preemption (SIGTERM, SIGKILL after the grace):
Google's autocheckpoint page says maintenance "Historically" began "immediately", and what the
guest sees is unknown (shared/facts/operations.md), so the emulator takes the harsher reading.
google-cloud-tpu 1.28's v2 `Node` has no `upcomingMaintenance`: tpujob reads it from the raw
answer (tpujob/cloud/gcp.py). A mixin of tpujob.emulator.apis.tpu.nodes.Emulator.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from tpujob.emulator.apis.bodies import copy_json
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.tpu.parts import EmulatorParts

if TYPE_CHECKING:
    from tpujob.emulator.apis.tpu.nodes import Node

WINDOW_SECONDS = 3600  # how long the announced window lasts (Google gives no fixed length)


def _upcoming(in_seconds: float) -> dict:
    """An UpcomingMaintenance PENDING in `in_seconds` (SCHEDULED; at once, UNSCHEDULED): the TPU
    API's Node.upcomingMaintenance and Compute Engine's resourceStatus.upcomingMaintenance have
    the same fields."""
    return {
        "type": "SCHEDULED" if in_seconds > 0 else "UNSCHEDULED",
        "canReschedule": False,
        "windowStartTime": _rfc3339(in_seconds),
        "windowEndTime": _rfc3339(in_seconds + WINDOW_SECONDS),
        "latestWindowStartTime": _rfc3339(in_seconds),
        "maintenanceStatus": "PENDING",
    }


def _rfc3339(seconds_from_now: float) -> str:
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds_from_now)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Maintenance(EmulatorParts):
    """Announce maintenance on a node and start it when its window opens."""

    def announce_maintenance(self, node_ref: str, in_seconds: float = 0.0) -> dict:
        """A window `in_seconds` from now (0: unscheduled, starting at once). Returns the node."""
        if in_seconds < 0:
            raise ApiError(400, "inSeconds must be >= 0")
        if "/instances/" in node_ref:
            return self._announce_vm_maintenance(node_ref, in_seconds)
        with self._lock:
            node = self.find_node(node_ref)
            if node.body["state"] != "READY":
                raise ApiError(400, f"node {node.node_id} is {node.body['state']}, not READY",
                               status="FAILED_PRECONDITION")
            node.body["upcomingMaintenance"] = _upcoming(in_seconds)
            answer = copy_json(node.body)
        self._spawn(self._start_maintenance, node, in_seconds)
        return answer

    def _announce_vm_maintenance(self, ref: str, in_seconds: float) -> dict:
        """A Compute Engine TPU VM's maintenance: the same UpcomingMaintenance, in the Instance's
        `resourceStatus.upcomingMaintenance` (google-cloud-compute ResourceStatus,
        UpcomingMaintenance: type, canReschedule, window times, maintenanceStatus). A TPU VM
        takes onHostMaintenance TERMINATE only, so when the window opens it is stopped
        (TERMINATED, no preemption recorded), as instances.stop does."""
        vms = self.tpu_vms
        assert vms is not None
        with self._lock:
            inst = vms.find(ref)
            if inst.body["status"] != "RUNNING":
                raise ApiError(400, f"instance {inst.name} is {inst.body['status']}, not RUNNING",
                               status="FAILED_PRECONDITION")
            inst.body.setdefault("resourceStatus", {})["upcomingMaintenance"] = _upcoming(in_seconds)
            answer = copy_json(inst.body)
        self._spawn(self._start_vm_maintenance, inst, in_seconds)
        return answer

    def _start_vm_maintenance(self, inst, in_seconds: float) -> None:
        if not self._sleep(in_seconds, inst):
            return
        with self._lock:
            if inst.gone or inst.deleting or inst.body["status"] != "RUNNING":
                return
            inst.body["resourceStatus"]["upcomingMaintenance"]["maintenanceStatus"] = "ONGOING"
        assert self.tpu_vms is not None
        self.tpu_vms.stop(inst.project, inst.zone, inst.name)

    def _start_maintenance(self, node: Node, in_seconds: float) -> None:
        if not self._sleep(in_seconds, node):
            return
        with self._lock:
            if node.gone or node.deleting or "upcomingMaintenance" not in node.body:
                return
            node.body["upcomingMaintenance"]["maintenanceStatus"] = "ONGOING"
            node.body["health"] = "UNHEALTHY_MAINTENANCE"
            node.body["healthDescription"] = "The node is under maintenance and will resume once rescheduled."
            machines, node.preempting = node.machines, True
            self._changed.notify_all()
        try:
            if machines:
                machines.preempt(self.preempt_grace)
        finally:
            with self._lock:
                node.preempting = False
