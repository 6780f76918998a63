"""The lab's scheduler, decided: which QUEUED jobs the quota admits, in what order, which
lower-band jobs a higher band evicts, and why each of the others waits. Pure: no I/O, no clock,
no store (like decide.py); the sweep (reconciler.py) reads the rows, calls `plan`, and carries
each decision out in its own transaction (Store.admit re-checks the caps under a lock).

The formulas (docs/scheduler.md says them again):
- A cap covers a job when the family matches and the cap's region and provisioning are "" (any)
  or the job's. A job is admitted only if, for every cap covering it, the chips held by the jobs
  it covers (every active job but the QUEUED ones) plus its own stay within the cap.
- Order: band (high, normal, low), then within a band the owner with the lowest share
      share(owner) = (U(owner) + held_chips(owner) * 1 h) / weight(owner)
  where U is the decayed chip-hours of the owner's attempts,
      U = sum over attempts of chips * integral over [start, end] of 2^(-(now - t) / H) dt
        = chips * H / ln 2 * (2^(-(now - end) / H) - 2^(-(now - start) / H))   (in hours)
  with H the half-life (HALF_LIFE_HOURS); each job admitted in a plan adds its chips to its
  owner's held_chips before the next pick. Ties: the job queued first.
- The queue is strict per cap: a job that does not fit blocks the jobs after it under the same
  cap (no backfill), so a large job is never starved by a stream of small ones.
- Eviction: a waiting job blocked by a cap may evict jobs of lower bands under that cap, lowest
  band first, most recently started first, each running at least MIN_RUN_SECONDS, only when
  those evictions free enough chips for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

BANDS = ("high", "normal", "low")
_RANK = {band: i for i, band in enumerate(BANDS)}
HALF_LIFE_HOURS = 24.0
# A running job younger than this is never evicted: its slice's provisioning and setup (minutes)
# would be thrown away before it took a step, and two bands would take turns forever.
MIN_RUN_SECONDS = 600.0


@dataclass(frozen=True)
class Demand:
    """What a job holds while admitted: `chips` of a TPU family in a region, at a provisioning
    (spot, or on-demand for everything else Google bills as reserved capacity)."""
    family: str
    region: str
    provisioning: str
    chips: int


@dataclass(frozen=True)
class Cap:
    family: str
    region: str  # "" : every region
    provisioning: str  # "" : spot and on-demand alike
    chips: int

    def covers(self, demand: Demand) -> bool:
        return (self.family == demand.family and self.region in ("", demand.region)
                and self.provisioning in ("", demand.provisioning))

    @property
    def label(self) -> str:
        where = f" in {self.region}" if self.region else ""
        how = f" {self.provisioning}" if self.provisioning else ""
        return f"{self.family}{how} chips{where}"


@dataclass(frozen=True)
class Holder:
    """An admitted job: it holds its chips until it ends or is evicted."""
    job_id: int
    owner: str
    band: str
    demand: Demand
    running_seconds: float | None = None  # None: not RUNNING (nothing to evict yet)
    seconds_left: float | None = None  # its estimated end (progress, max_run); None: unknown
    # Why its end is not known, in words after "alice's job 000003 " (an estimate names it).
    no_end: str = "reports no ETA"


@dataclass(frozen=True)
class Waiter:
    job_id: int
    owner: str
    band: str
    demand: Demand
    queued_at: float


@dataclass(frozen=True)
class Decision:
    job_id: int
    admit: bool
    reason: str = ""  # why it waits, in words ("" when admitted)
    evict: tuple[int, ...] = ()  # jobs to evict first (admit is False until they are gone)
    # In how many seconds it may start: when the ends the holders estimate free its chips and
    # those of the jobs ahead of it under the cap; None: not known, and `unknown` says why.
    starts_in: float | None = None
    unknown: str = ""  # why there is no estimate ("unknown: alice's job 000003 reports no ETA")


@dataclass
class Plan:
    decisions: list[Decision] = field(default_factory=list)

    @property
    def admitted(self) -> list[int]:
        return [d.job_id for d in self.decisions if d.admit]


def band_of(value: str | None) -> str:
    return value if value in _RANK else "normal"


def decayed_chip_hours(chips: int, start: float, end: float, now: float,
                       half_life_hours: float = HALF_LIFE_HOURS) -> float:
    """chips x the hours from start to end, each hour weighted 2^(-age / half-life)."""
    if end <= start:
        return 0.0
    h = half_life_hours * 3600.0
    weight = (2.0 ** (-(now - end) / h) - 2.0 ** (-(now - start) / h)) * h / math.log(2)
    return float(chips * weight / 3600.0)


def held_by(cap: Cap, holders: Iterable[Holder]) -> dict[str, int]:
    """Chips of the cap held per owner."""
    held: dict[str, int] = {}
    for h in holders:
        if cap.covers(h.demand):
            held[h.owner] = held.get(h.owner, 0) + h.demand.chips
    return held


def exceeded(demand: Demand, caps: Iterable[Cap], holders: Iterable[Holder]) -> Cap | None:
    """The first cap the demand would go over with these holders; None: it fits. (The store's
    admission re-checks this inside its transaction.)"""
    holders = list(holders)
    for cap in caps:
        if cap.covers(demand) and sum(held_by(cap, holders).values()) + demand.chips > cap.chips:
            return cap
    return None


def order(waiters: Iterable[Waiter], usage: dict[str, float], weights: dict[str, float],
          holders: Iterable[Holder]) -> list[Waiter]:
    """The queue in admission order: band, then fair share (see the module's formula)."""
    held: dict[str, float] = {}
    for h in holders:
        held[h.owner] = held.get(h.owner, 0.0) + h.demand.chips
    left = sorted(waiters, key=lambda w: (_RANK[band_of(w.band)], w.queued_at, w.job_id))
    ordered: list[Waiter] = []
    while left:
        band = _RANK[band_of(left[0].band)]
        in_band = [w for w in left if _RANK[band_of(w.band)] == band]

        def share(w: Waiter) -> tuple[float, float, int]:
            weight = weights.get(w.owner, 1.0) or 1.0
            return ((usage.get(w.owner, 0.0) + held.get(w.owner, 0.0)) / weight, w.queued_at, w.job_id)

        pick = min(in_band, key=share)
        ordered.append(pick)
        left.remove(pick)
        held[pick.owner] = held.get(pick.owner, 0.0) + pick.demand.chips
    return ordered


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _held_text(cap: Cap, holders: list[Holder]) -> str:
    held = held_by(cap, holders)
    total = sum(held.values())
    owners = ", ".join(f"{owner} {chips}" for owner, chips in sorted(held.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"quota: {total}/{cap.chips} {cap.label}" + (f" held by {owners}" if owners else "")


def evictions(waiter: Waiter, cap: Cap, holders: list[Holder], *,
              min_run_seconds: float = MIN_RUN_SECONDS) -> tuple[int, ...]:
    """The lower-band jobs under `cap` whose eviction lets `waiter` in: lowest band first, the
    most recently started first, each run at least min_run_seconds; () when they are not enough."""
    rank = _RANK[band_of(waiter.band)]
    need = sum(held_by(cap, holders).values()) + waiter.demand.chips - cap.chips
    if need <= 0:
        return ()
    candidates = sorted(
        (h for h in holders if cap.covers(h.demand) and _RANK[band_of(h.band)] > rank
         and h.running_seconds is not None and h.running_seconds >= min_run_seconds),
        key=lambda h: (-_RANK[band_of(h.band)], h.running_seconds, -h.job_id))
    chosen: list[int] = []
    for h in candidates:
        if need <= 0:
            break
        chosen.append(h.job_id)
        need -= h.demand.chips
    return tuple(chosen) if need <= 0 else ()


def start_estimate(chips: int, cap: Cap, holders: list[Holder]) -> tuple[float | None, str]:
    """Seconds until the holders under `cap` that estimate their end free `chips` beyond the cap's
    room (0: room now), and ""; or None and why not, naming the holders whose end is not known
    (never a guess: the estimate is the known ends' or none)."""
    need = sum(held_by(cap, holders).values()) + chips - cap.chips
    if need <= 0:
        return 0.0, ""
    under = [h for h in holders if cap.covers(h.demand)]
    for h in sorted((h for h in under if h.seconds_left is not None), key=lambda h: h.seconds_left or 0.0):
        need -= h.demand.chips
        if need <= 0:
            return h.seconds_left, ""
    silent = [f"{h.owner or 'nobody'}'s job {h.job_id:06d} {h.no_end}" for h in under if h.seconds_left is None]
    if not silent:  # the cap is smaller than the job and those ahead: no end frees enough
        return None, f"unknown: a quota of {cap.chips} {cap.label} is too small for this job and those ahead of it"
    return None, "unknown: " + "; ".join(silent)


def plan(waiters: Iterable[Waiter], holders: Iterable[Holder], caps: Iterable[Cap], *,
         usage: dict[str, float] | None = None, weights: dict[str, float] | None = None,
         min_run_seconds: float = MIN_RUN_SECONDS) -> Plan:
    """Every QUEUED job's decision for this sweep, in queue order."""
    caps = list(caps)
    holders = list(holders)
    queue = order(waiters, usage or {}, weights or {}, holders)
    blocked: set[Cap] = set()  # caps a job earlier in the queue waits on: no backfill past it
    ahead: dict[Cap, int] = {}  # chips of the jobs waiting ahead, per cap
    evicting: set[int] = set()
    places: dict[str, int] = {}
    result = Plan()
    for w in queue:
        band = band_of(w.band)
        mine = [c for c in caps if c.covers(w.demand)]
        over = exceeded(w.demand, mine, holders)
        waits_on = next((c for c in mine if c in blocked), None) or over
        if waits_on is None:
            holders.append(Holder(w.job_id, w.owner, band, w.demand))
            result.decisions.append(Decision(w.job_id, True))
            continue
        places[band] = places.get(band, 0) + 1
        reason = f"{_held_text(waits_on, holders)}; {_ordinal(places[band])} in band {band}"
        evict: tuple[int, ...] = ()
        if waits_on not in blocked and over is not None:
            others = [h for h in holders if h.job_id not in evicting]
            evict = evictions(w, over, others, min_run_seconds=min_run_seconds)
            if evict:
                evicting.update(evict)
                reason += f"; evicting {len(evict)} lower-band job(s)"
        if evict:
            starts_in, unknown = None, (f"unknown: admitted once {len(evict)} lower-band job(s) have checkpointed "
                                        "and stopped (their grace)")
        else:
            starts_in, unknown = start_estimate(ahead.get(waits_on, 0) + w.demand.chips, waits_on, holders)
        for cap in mine:
            ahead[cap] = ahead.get(cap, 0) + w.demand.chips
        blocked.update(mine)
        result.decisions.append(Decision(w.job_id, False, reason, evict, starts_in, unknown))
    return result
