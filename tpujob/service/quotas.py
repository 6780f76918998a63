"""The lab's scheduler as commands: its caps (`tpujob quota`), the users' fair-share weights and
the queue in order (`tpujob queue`). The decisions themselves are reconcile/admission.py's;
docs/scheduler.md says how they are made."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpujob.catalogue import generation
from tpujob.durations import duration_text
from tpujob.errors import NotFoundError, UsageError
from tpujob.service.context import Context
from tpujob.store.models import Job, Quota

_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+\Z")  # us-west4, europe-west4, asia-northeast1
PROVISIONINGS = ("spot", "on-demand")


def _key(family: str, region: str | None, provisioning: str | None) -> tuple[str, str, str]:
    """The cap's key, checked: a family by any of its names (v5e, v5litepod, v5litepod-8: "v5e"),
    a region (not a zone), spot or on-demand; UsageError (exit 2) names what is wrong."""
    fam = generation(family).alias
    where = (region or "").strip().lower()
    if where and not _REGION.match(where):
        raise UsageError(f"--region {region!r} is not a region like us-west4 (a zone's region: drop its last part)")
    how = (provisioning or "").strip().lower()
    if how and how not in PROVISIONINGS:
        raise UsageError(f"--provisioning {provisioning!r}: one of {', '.join(PROVISIONINGS)}")
    return fam, where, how


def set_quota(ctx: Context, family: str, chips: int, *, region: str | None = None,
              provisioning: str | None = None) -> Quota:
    if chips < 0:
        raise UsageError(f"CHIPS {chips}: a cap is 0 chips or more")
    fam, where, how = _key(family, region, provisioning)
    return ctx.store.set_quota(fam, chips, region=where, provisioning=how)


def unset_quota(ctx: Context, family: str, *, region: str | None = None, provisioning: str | None = None) -> None:
    fam, where, how = _key(family, region, provisioning)
    if not ctx.store.remove_quota(fam, region=where, provisioning=how):
        raise NotFoundError(f"no quota for {fam}" + (f" in {where}" if where else "") + (f" ({how})" if how else ""))


def list_quotas(ctx: Context) -> list[tuple[Quota, int]]:
    """Each cap with the chips held under it now."""
    from tpujob.reconcile.scheduling import caps_of, holder_of

    now = ctx.store.clock()
    holders = [holder_of(j, now) for j in ctx.store.holding_jobs()]
    quotas = ctx.store.quotas()
    return [(q, sum(h.demand.chips for h in holders if cap.covers(h.demand)))
            for q, cap in zip(quotas, caps_of(quotas))]


def set_weight(ctx: Context, user: str, weight: float) -> None:
    if not weight > 0:
        raise UsageError(f"WEIGHT {weight}: a share's weight is more than 0 (1 is everyone's default)")
    if not user.strip():
        raise UsageError("USER is empty")
    ctx.store.set_weight(user.strip(), weight)


def weights(ctx: Context) -> dict[str, float]:
    return ctx.store.weights()


def set_budget(ctx: Context, user: str, dollars: float, per: str) -> None:
    """A user's spending cap per UTC day, week or month (reconcile/spending.py)."""
    from tpujob.reconcile.spending import PERIODS

    if per not in PERIODS:
        raise UsageError(f"--per {per!r}: one of {', '.join(PERIODS)}")
    if not dollars > 0:
        raise UsageError(f"DOLLARS {dollars:g}: a budget is more than 0")
    if not user.strip():
        raise UsageError("USER is empty")
    ctx.store.set_budget(user.strip(), dollars, per)


def list_budgets(ctx: Context) -> list[tuple[str, float, str, float]]:
    """(user, dollars, period, spent this period) of each budget."""
    from tpujob.reconcile import spending
    from tpujob.reconcile.scheduling import spends_since

    now = ctx.store.clock()
    rows = []
    for b in ctx.store.budgets():
        since = spending.period_start(b.period, now)
        spent = spending.cost([s for s in spends_since(ctx.store, since) if s.owner == b.owner], now, since)
        rows.append((b.owner, b.dollars, b.period, spent))
    return rows


@dataclass(frozen=True)
class QueueRow:
    position: int | None  # in the order the next sweep admits; None: a cost cap holds it back
    job: Job
    chips: int
    share: float  # the owner's weighted decayed chip-hours (admission's formula)
    reason: str  # "" : admitted at the next sweep
    starts_in: float | None  # seconds, as the running jobs' progress and max_run estimate; None: unknown
    unknown: str = ""  # why starts_in is None, in words ("unknown: alice's job 000003 reports no ETA")

    @property
    def waiting_for(self) -> str:
        return self.reason or "nothing: within the quota, admitted at the next sweep"

    @property
    def starts(self) -> str:
        """The estimate as `queue`, `show` and the dashboard print it."""
        if self.starts_in is None:
            return self.unknown or "unknown"
        return "next sweep" if self.starts_in <= 0 else f"in about {duration_text(self.starts_in, finest='m')}"


def queue(ctx: Context) -> list[QueueRow]:
    """The QUEUED jobs in the order the next sweep would admit them, each with why it waits and
    when it may start (admission.start_estimate, from the running jobs' progress and max_run);
    then those a cost cap holds back (reconcile/spending.py), as the sweep holds them back."""
    from tpujob.reconcile.scheduling import budget_stops, demand_of, queue_plan, usage_of
    from tpujob.store.states import State

    now = ctx.store.clock()
    stopped = budget_stops(ctx.store, ctx.store.list_jobs(states=[State.QUEUED]), now)
    queued, plan = queue_plan(ctx.store, now, estimate=True, stopped=stopped)
    by_id = {j.id: j for j in queued}
    usage, weight = usage_of(ctx.store, now), ctx.store.weights()

    def share(job: Job) -> float:
        owner = job.owner or ""
        return usage.get(owner, 0.0) / (weight.get(owner, 1.0) or 1.0)

    rows = []
    for i, decision in enumerate(plan.decisions, 1):
        job = by_id[decision.job_id]
        rows.append(QueueRow(i, job, demand_of(job).chips, share(job), decision.reason,
                             0.0 if decision.admit else decision.starts_in, decision.unknown))
    for job_id, why in sorted(stopped.items()):
        job = ctx.store.get(job_id)
        rows.append(QueueRow(None, job, demand_of(job).chips, share(job), why, None,
                             "unknown: not admitted while its cost cap is reached"))
    return rows


def place_of(ctx: Context, job: Job) -> QueueRow | None:
    """A QUEUED job's row of the queue (`show`, the dashboard): the same reason, position and
    estimate `tpujob queue` prints; None for a job in any other state."""
    if job.state != "QUEUED":
        return None
    return next((r for r in queue(ctx) if r.job.id == job.id), None)
