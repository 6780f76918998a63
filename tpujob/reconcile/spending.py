"""What jobs and users have spent, and which jobs a cost cap stops. Pure: no I/O, no clock, no
store (the sweep passes the store's time and rows; reconciler.py).

Spend is each attempt's time (from its start, the slice's request, to its end, or now) times the
job's price per hour at its provisioning (ResolvedSpec.cost_per_hour_usd, every slice together;
tpujob/catalogue.py's prices). A job without a published price spends nothing that a cap can
count: its spec may not set max_cost (spec/resolution.py). Checked once a sweep, so a cap is
overshot by at most one sweep's spend (plus the stop's grace).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable

PERIODS = ("day", "week", "month")


@dataclass(frozen=True)
class Spend:
    job_id: int
    owner: str
    usd_per_hour: float
    started: float
    ended: float | None  # None: running now


@dataclass(frozen=True)
class Cap:
    dollars: float
    period: str  # day | week | month (UTC)


def period_start(period: str, now: float) -> float:
    """The start of the UTC day, week (Monday) or month that `now` is in."""
    day = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        day -= timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    elif period != "day":
        raise ValueError(f"unknown period {period!r}")
    return day.timestamp()


def cost(spends: Iterable[Spend], now: float, since: float = 0.0) -> float:
    """Dollars spent from `since` to `now` by these attempts."""
    total = 0.0
    for s in spends:
        start, end = max(s.started, since), min(now, s.ended if s.ended is not None else now)
        if end > start:
            total += s.usd_per_hour * (end - start) / 3600.0
    return total


def owners_over(spends: list[Spend], caps: dict[str, Cap], now: float) -> dict[str, str]:
    """The owners who reached their budget this period -> why, in words."""
    over = {}
    for owner, cap in caps.items():
        spent = cost((s for s in spends if s.owner == owner), now, period_start(cap.period, now))
        if spent >= cap.dollars:
            over[owner] = f"budget of {owner} reached: ${spent:.2f} of ${cap.dollars:.2f} this {cap.period}"
    return over


def stops(jobs: dict[int, tuple[str, float | None]], spends: list[Spend], caps: dict[str, Cap],
          now: float) -> dict[int, str]:
    """Of `jobs` (id -> (owner, max_cost)), those a cap stops now -> why: the job's own max_cost
    reached, or its owner's budget for the period."""
    over = owners_over(spends, caps, now)
    stopped = {}
    for job_id, (owner, max_cost) in jobs.items():
        if max_cost is not None:
            spent = cost((s for s in spends if s.job_id == job_id), now)
            if spent >= max_cost:
                stopped[job_id] = f"max_cost reached: ${spent:.2f} of ${max_cost:.2f}"
                continue
        if owner in over:
            stopped[job_id] = over[owner]
    return stopped
