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
guest sees is not said there (nor anywhere found), so the emulator takes the harsher reading.
google-cloud-tpu 1.28's v2 `Node` has no `upcomingMaintenance`: tpujob reads it from the raw
answer (tpujob/cloud/tpu_api.py). A mixin of tpujob.emulator.apis.tpu.nodes.Emulator.
"""

from __future__ import annotations

import datetime

WINDOW_SECONDS = 3600  # how long the announced window lasts (Google gives no fixed length)


def upcoming(in_seconds: float) -> dict:
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
