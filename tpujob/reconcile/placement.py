"""Which placements (accelerator, zone) a job may still try: pure functions over its attempts.

A placement Google refused for good is skipped until a slice comes up again: one whose zone does
not offer the accelerator ("unavailable"), and every placement in the region of one refused for
a spent regional quota ("no_quota": TPU quotas are per region for most families, e.g.
TPUV6EPreemptiblePerProjectPerRegionForTPUAPI: marin PR #1612), and every placement in the zone
of one refused for a spent zonal quota ("no_zone_quota": ...PerProjectPerZoneForTPUAPI, "in zone
Z": skypilot sky/backends/cloud_vm_ray_backend.py) or for a zone the project may not use ("location_denied":
LOCATION_POLICY_VIOLATED).
"""

from __future__ import annotations

from typing import Iterable, Protocol

from tpujob.store.states import AttemptEnd

# Attempts that never got a slice: a run of them, newest first, is what the job is stuck on.
NO_SLICE = (AttemptEnd.UNAVAILABLE, AttemptEnd.NO_QUOTA, AttemptEnd.NO_CAPACITY, AttemptEnd.REFUSED,
             AttemptEnd.NO_ZONE_QUOTA, AttemptEnd.LOCATION_DENIED)


class AttemptLike(Protocol):
    zone: str
    accelerator: str
    end_reason: str | None


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def blocked(options: list[tuple[str, str]], attempts: Iterable[AttemptLike]) -> frozenset[int]:
    """The placement indexes (into `options`, [(accelerator, zone)]) refused for good since a
    slice of the job last came up. `attempts` in order, oldest first."""
    out: set[int] = set()
    for attempt in reversed(list(attempts)):
        if attempt.end_reason is None:  # the current attempt, still open
            continue
        if attempt.end_reason not in NO_SLICE:
            break
        for i, (accelerator, zone) in enumerate(options):
            if (attempt.end_reason == AttemptEnd.UNAVAILABLE
                    and (accelerator, zone) == (attempt.accelerator, attempt.zone)):
                out.add(i)
            elif attempt.end_reason == AttemptEnd.NO_QUOTA and region_of(zone) == region_of(attempt.zone):
                out.add(i)
            elif attempt.end_reason in (AttemptEnd.NO_ZONE_QUOTA, AttemptEnd.LOCATION_DENIED) \
                    and zone == attempt.zone:
                out.add(i)  # a zonal quota, or a zone the project may not use: every accelerator there
    return frozenset(out)


def following(current: int, count: int, skip: frozenset[int]) -> int:
    """The placement after `current`, cycling back to the primary, passing over `skip`; the
    plain next one when every placement is skipped (decide fails the job before that)."""
    for step in range(1, count + 1):
        candidate = (current + step) % count
        if candidate not in skip:
            return candidate
    return (current + 1) % count


def after_interruption(current: int, *, auto: bool) -> int:
    """The placement of the attempt after one whose slice ran and was lost: the same one as
    written (a preemption says nothing of capacity elsewhere); with `placement: auto`, the
    best one again, as the slice that was lost freed the job from the miss that moved it on."""
    return 0 if auto else current
