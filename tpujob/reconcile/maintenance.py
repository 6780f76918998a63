"""Google's maintenance of a slice as decide weighs it: pure, over the observation's fields
(Node.health, Node.upcomingMaintenance from the zone's one nodes list: cloud/tpu_resources.py)."""

from __future__ import annotations

from typing import Protocol


class Observed(Protocol):
    """Read only: a frozen Observation (or a Slice) answers it."""

    @property
    def health(self) -> str | None: ...
    @property
    def health_detail(self) -> str: ...
    @property
    def maintenance_in_seconds(self) -> float | None: ...
    @property
    def maintenance_type(self) -> str: ...


def maintenance_reason(obs: Observed, lead_seconds: float) -> str | None:
    """Why the slice must be left before Google's maintenance takes it (None: no need): health
    UNHEALTHY_MAINTENANCE (tpu.v2.json: "under maintenance ... will resume running once
    rescheduled"), or a window opening within `lead_seconds`, before the next sweep would see it."""
    if obs.health == "UNHEALTHY_MAINTENANCE":
        detail = f": {obs.health_detail}" if obs.health_detail else ""
        return f"slice under maintenance (health UNHEALTHY_MAINTENANCE{detail})"
    starts_in = obs.maintenance_in_seconds
    if starts_in is not None and starts_in <= lead_seconds:
        kind = f"{obs.maintenance_type.lower()} " if obs.maintenance_type else ""
        when = f"opens in {starts_in:.0f} s" if starts_in > 0 else "is open"
        return f"{kind}maintenance window {when}"
    return None
