"""A seeded spot market for the emulator: each zone with its own capacity and interruption rate,
changing over time, so that tpujob's placement and checkpoint spacing (docs/goodput.md) have
something true to find. `tpujob emulator market` sets it; the world consults it.

Google publishes no rates: "Spot VMs are preemptible at any time"
(cloud.google.com/tpu/docs/spot-compute). So the market is a model, not a recording:
per zone, a mean time between interruptions (each READY node is preempted, through the
emulator's own preemption, with probability 1 - exp(-dt/M) per tick of dt) and a share of time
out of stock (whole windows of `window` seconds, each out with that probability: a create in one
meets the emulator's own stockout, a queued request waits it out). Both drift by time of day
(a sine of the zone's own phase). Time runs `speed` times faster than the wall clock, so a
market of hours plays out in minutes. Everything is a function of the seed: two runs of one
seed see the same windows.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass, field

DAY = 86400.0


@dataclass(frozen=True)
class ZoneMarket:
    mtbi_seconds: float  # mean time between interruptions of a READY node (market time)
    stockout: float  # the share of windows the zone is out of stock, 0..1


def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by `parts` (the seed, a zone, a window): no shared RNG state."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class Market:
    seed: int
    zones: dict[str, ZoneMarket]
    speed: float = 1.0  # market seconds per wall second
    drift: float = 0.4  # the time-of-day swing of the rates, as a log amplitude
    window: float = 1800.0  # market seconds a zone stays in or out of stock
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        for zone, z in self.zones.items():
            if not (z.mtbi_seconds > 0 and 0 <= z.stockout <= 1):
                raise ValueError(f"{zone}: mtbiSeconds must be > 0 and stockout within [0, 1]")
        if not (self.speed > 0 and self.window > 0 and self.drift >= 0):
            raise ValueError("speed and window must be > 0, drift >= 0")
        self._rng = random.Random(f"market-{self.seed}")

    def now(self) -> float:
        """Market time: seconds since the market was set, `speed` times the wall clock's."""
        return (time.monotonic() - self.started) * self.speed

    def _swing(self, zone: str, t: float) -> float:
        return math.exp(self.drift * math.sin(2 * math.pi * t / DAY + 2 * math.pi * _unit(self.seed, zone)))

    def mtbi_at(self, zone: str, t: float) -> float:
        return self.zones[zone].mtbi_seconds * self._swing(zone, t)

    def stockout_at(self, zone: str, t: float) -> float:
        return min(1.0, self.zones[zone].stockout / self._swing(zone, t))

    def stocked_out(self, zone: str, t: float) -> bool:
        """Whether `zone` is out of stock at market time `t` (one draw per window)."""
        if zone not in self.zones:
            return False
        k = int(t // self.window)
        return _unit(self.seed, zone, k) < self.stockout_at(zone, k * self.window)

    def interrupts(self, zone: str, t: float, dt: float) -> bool:
        """Whether a READY node in `zone` is preempted in the next `dt` market seconds."""
        if zone not in self.zones:
            return False
        return self._rng.random() < 1 - math.exp(-dt / self.mtbi_at(zone, t))

    def describe(self) -> dict:
        t = self.now()
        return {"seed": self.seed, "speed": self.speed, "window": self.window, "marketSeconds": round(t, 1),
                "zones": {z: {"mtbiSeconds": m.mtbi_seconds, "stockout": m.stockout,
                              "mtbiNow": round(self.mtbi_at(z, t), 1), "stockedOut": self.stocked_out(z, t)}
                          for z, m in sorted(self.zones.items())}}
