"""Goodput per dollar over the store: the lab's history as evidence (`history`), the zones an
accelerator may use ranked by it (`zones`), `placement: auto`'s order at create
(`auto_placement`), and the ledgers of many jobs added up (`report`).

On a shared store every job of the lab counts, whoever submitted it. The decisions themselves
are reconcile/risk.py's (pure); this module only reads the store into its terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tpujob.errors import UsageError
from tpujob.reconcile.history import history as store_history
from tpujob.reconcile.risk import Choice, Evidence, Key, ordered
from tpujob.service.context import Context
from tpujob.service.ledger import BUCKETS, Ledger, add_up, attempt_ledgers, job_ledger, price_of
from tpujob.spec.stored import spec_of

Group = Literal["user", "zone", "accelerator"]
GROUPS: tuple[Group, ...] = ("user", "zone", "accelerator")


def history(ctx: Context, now: float | None = None) -> dict[Key, Evidence]:
    """Every job's attempts in the store as evidence, per (zone, accelerator, provisioning)."""
    return store_history(ctx.store, ctx.store.clock() if now is None else now)


def zones(ctx: Context, accelerator: str, provisioning: str = "spot") -> list[tuple[str, Choice]]:
    """Each zone offering `accelerator` (the catalogue's), best first by expected goodput per
    dollar from the store's history, with its evidence. SpecError: not an accelerator type."""
    from tpujob.catalogue import zones_offering

    places = [(accelerator, z) for z in zones_offering(accelerator)]
    ranked = ordered(places, provisioning, history(ctx), price_of(provisioning))
    return [(places[c.index][1], c) for c in ranked]


def auto_placement(ctx: Context, placements: list[tuple[str, str]], provisioning: str) -> list[Choice]:
    """`placement: auto`: the spec's placements by expected goodput per dollar (reconcile/risk)."""
    return ordered(placements, provisioning, history(ctx), price_of(provisioning))


@dataclass
class ReportRow:
    key: str
    jobs: int
    wall_seconds: float
    buckets: dict[str, float] = field(default_factory=dict)
    dollars: dict[str, float | None] = field(default_factory=dict)

    @property
    def total_dollars(self) -> float | None:
        values = list(self.dollars.values())
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

    @property
    def training_per_dollar(self) -> float | None:
        """Training hours per dollar: the goodput a night bought."""
        total = self.total_dollars
        return None if not total else self.buckets.get("training", 0.0) / 3600 / total

    def to_json(self) -> dict:
        return {"key": self.key, "jobs": self.jobs, "wall_seconds": round(self.wall_seconds, 3),
                "buckets": {k: round(v, 3) for k, v in self.buckets.items()},
                "dollars": {k: None if v is None else round(v, 4) for k, v in self.dollars.items()},
                "total_dollars": None if self.total_dollars is None else round(self.total_dollars, 4),
                "training_hours_per_dollar": self.training_per_dollar}


def report(ctx: Context, since_seconds: float, by: str, now: float | None = None) -> list[ReportRow]:
    """The ledgers of every job alive in the last `since_seconds`, clipped to that window and
    added up per user, zone or accelerator (an attempt's own, for zone and accelerator; the wait
    before a job's first attempt counts where that attempt went)."""
    if by not in GROUPS:
        raise UsageError(f"--by must be one of {', '.join(GROUPS)}, not {by!r}")
    now = ctx.store.clock() if now is None else now
    lo = now - since_seconds
    jobs = [j for j in ctx.store.list_jobs(include_ended=True) if (j.ended_at or now) >= lo]
    attempts = ctx.store.attempts_of([j.id for j in jobs])
    groups: dict[str, list[Ledger]] = {}
    members: dict[str, set[int]] = {}
    for job in jobs:
        mine, events = attempts.get(job.id, []), ctx.store.events(job.id)
        price = price_of(spec_of(job).provisioning)
        if by == "user":
            parts = [(job.owner or "-", job_ledger(job, mine, events, now, price, lo=max(lo, job.created_at)))]
        else:
            column = "zone" if by == "zone" else "accelerator"
            first = getattr(mine[0], column) if mine else getattr(job, column)
            head = job_ledger(job, mine, events, now, price, lo=max(lo, job.created_at),
                              hi=max(lo, mine[0].started_at) if mine else None)
            parts = [(first, head)]
            by_number = {a.number: a for a in mine}
            for number, led in attempt_ledgers(job, mine, events, now, price):
                if led.end > lo:
                    clipped = job_ledger(job, mine, events, now, price, lo=max(lo, led.start), hi=led.end)
                    parts.append((getattr(by_number[number], column), clipped))
        for key, led in parts:
            if led.wall_seconds > 0:
                groups.setdefault(key, []).append(led)
                members.setdefault(key, set()).add(job.id)
    rows = []
    for key in sorted(groups):
        wall, seconds, dollars = add_up(groups[key])
        rows.append(ReportRow(key, len(members[key]), wall, seconds, dollars))
    return rows


__all__ = ["BUCKETS", "GROUPS", "ReportRow", "auto_placement", "history", "report", "zones"]
