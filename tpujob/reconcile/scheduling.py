"""The sweep's admission step: the store's rows read as admission.py's inputs, its plan carried
out one decision per transaction (Store.admit re-checks the caps there), and each waiting job's
reason written for `list`, `show` and `tpujob queue`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from tpujob.catalogue import accelerator as accelerator_of
from tpujob.reconcile import admission, spending
from tpujob.reconcile.admission import Cap, Demand, Holder, Waiter
from tpujob.reconcile.placement import region_of
from tpujob.spec import ResolvedSpec
from tpujob.spec.stored import spec_of
from tpujob.store.models import Job, Quota
from tpujob.store.states import ENDED, State

if TYPE_CHECKING:
    from tpujob.store.repository import Store

# Attempts that ended this many half-lives ago weigh under 1/1000 of their chip-hours: not read.
_USAGE_HALF_LIVES = 10


@dataclass
class Admissions:
    admitted: list[int] = field(default_factory=list)
    evict: dict[int, str] = field(default_factory=dict)  # job id -> why (for its JobView)
    waiting: dict[int, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def provisioning_class(provisioning: str) -> str:
    """A quota's provisioning: spot (and legacy preemptible) or on-demand (everything else)."""
    return "spot" if provisioning in ("spot", "preemptible") else "on-demand"


def demand_of(job: Job) -> Demand:
    return demand_of_spec(spec_of(job))


def demand_of_spec(resolved: ResolvedSpec) -> Demand:
    return Demand(family=accelerator_of(resolved.accelerator).generation.alias, region=region_of(resolved.zone),
                  provisioning=provisioning_class(resolved.provisioning),
                  chips=resolved.chips * resolved.slices)


def covered(store: Store, resolved: ResolvedSpec) -> bool:
    """Whether one of the lab's caps covers a job of this spec (it is then recorded QUEUED)."""
    demand = demand_of_spec(resolved)
    return any(cap.covers(demand) for cap in caps_of(store.quotas()))


def caps_of(quotas: Iterable[Quota]) -> list[Cap]:
    return [Cap(q.family, q.region, q.provisioning, q.chips) for q in quotas]


def holder_of(job: Job, now: float, end: tuple[float | None, str] = (None, "")) -> Holder:
    """An admitted job as admission reads it; `end`: its estimated end (`end_of`), else unknown."""
    running = State(job.state) == State.RUNNING
    since = job.state_since if job.state_since is not None else job.updated_at
    return Holder(job.id, job.owner or "", admission.band_of(job.priority), demand_of(job),
                  running_seconds=now - since if running else None, seconds_left=end[0],
                  no_end=end[1] or "reports no ETA")


def end_of(store: Store, job: Job, now: float) -> tuple[float | None, str]:
    """A holding job's estimated end in seconds: its progress's time left (tpujob/progress.py)
    or what is left of its max_run_duration, whichever comes first; else None and why, in words
    (after "alice's job 000003 ")."""
    from tpujob import progress

    state = State(job.state)
    if state in ENDED:  # CANCELLED or ended with --keep-slice: it holds its slice until `delete`
        return None, f"is {state.value} and keeps its slice until deleted"
    attempt = store.current_attempt(job.id) if state == State.RUNNING else None
    if attempt is None:
        return None, f"has not started running ({state.value})"
    known = [p.seconds_left for p in [progress.of_attempt(attempt)] if p is not None and p.seconds_left is not None]
    limit = spec_of(job).max_run_duration_seconds
    if limit is not None:
        known.append(max(0.0, limit - (now - attempt.started_at)))
    return (min(known), "") if known else (None, "reports no ETA and has no max_run_duration")


def waiter_of(job: Job) -> Waiter:
    return Waiter(job.id, job.owner or "", admission.band_of(job.priority), demand_of(job),
                  queued_at=job.state_since if job.state_since is not None else job.created_at)


def usage_of(store: Store, now: float, half_life_hours: float = admission.HALF_LIFE_HOURS) -> dict[str, float]:
    """Each owner's decayed chip-hours (admission's formula), from the store's attempts."""
    usage: dict[str, float] = {}
    since = now - _USAGE_HALF_LIVES * half_life_hours * 3600.0
    for owner, accel, slices, started, ended in store.usage_rows(since):
        chips = accelerator_of(accel).chips * (slices or 1)
        key = owner or ""
        usage[key] = usage.get(key, 0.0) + admission.decayed_chip_hours(
            chips, started, now if ended is None else ended, now, half_life_hours)
    return usage


def budget_stops(store: Store, jobs: list[Job], now: float) -> dict[int, str]:
    """Of these jobs, those a cost cap stops now (reconcile/spending.py) -> why."""
    caps = {b.owner: spending.Cap(b.dollars, b.period) for b in store.budgets()}
    capped = [j.id for j in jobs if spec_of(j).spec.max_cost is not None]
    if not caps and not capped:
        return {}
    since = min((spending.period_start(c.period, now) for c in caps.values()), default=None)
    spends = [spending.Spend(job_id, owner or "", _price(spec), started, ended)
              for job_id, owner, spec, started, ended in store.spend_rows(capped, since)]
    return spending.stops({j.id: (j.owner or "", spec_of(j).spec.max_cost) for j in jobs}, spends, caps, now)


def spends_since(store: Store, since: float) -> list[spending.Spend]:
    """Every attempt running at or after `since`, with its job's price (`tpujob budget list`)."""
    return [spending.Spend(job_id, owner or "", _price(spec), started, ended)
            for job_id, owner, spec, started, ended in store.spend_rows(None, since)]


def _price(spec_json: str) -> float:
    return spec_of(_SpecRow(spec_json)).cost_per_hour_usd or 0.0


@dataclass(frozen=True)
class _SpecRow:
    spec_json: str


def queue_plan(store: Store, now: float, *, min_run_seconds: float = admission.MIN_RUN_SECONDS,
               stopped: dict[int, str] | None = None, estimate: bool = False) -> tuple[list[Job], admission.Plan]:
    """The QUEUED jobs and the plan for them, as the store has them now; a job a cost cap stops
    (`stopped`) waits for the next period, planned for nothing. `estimate`: with each waiting
    job's estimated start (one read per running job: `tpujob queue`, not the sweep)."""
    stopped = stopped or {}
    queued = [j for j in store.list_jobs(states=[State.QUEUED]) if j.id not in stopped]
    if not queued:
        return [], admission.Plan()
    holding = store.holding_jobs()
    holders = [holder_of(j, now, end_of(store, j, now)) if estimate else holder_of(j, now) for j in holding]
    plan = admission.plan([waiter_of(j) for j in queued], holders,
                          caps_of(store.quotas()), usage=usage_of(store, now), weights=store.weights(),
                          min_run_seconds=min_run_seconds)
    return queued, plan


def fits_for(job: Job, caps: list[Cap], now: float) -> Callable[[list[Job]], bool]:
    """Whether `job` still fits beside the jobs holding chips, as Store.admit reads them inside
    its transaction."""
    demand = demand_of(job)

    def fits(holding: list[Job]) -> bool:
        holders = [holder_of(j, now) for j in holding if j.id != job.id]
        return admission.exceeded(demand, caps, holders) is None

    return fits


def admit_queued(store: Store, *, min_run_seconds: float = admission.MIN_RUN_SECONDS,
                 stopped: dict[int, str] | None = None) -> Admissions:
    """Plan, then carry out each decision in its own transaction: an admission re-checks the caps
    against the holders as they are then (another sweep may have admitted meanwhile); a job that
    no longer fits stays QUEUED for the next sweep. `stopped`: jobs a cost cap holds back."""
    now = store.clock()
    queued, plan = queue_plan(store, now, min_run_seconds=min_run_seconds, stopped=stopped)
    by_id = {j.id: j for j in queued}
    caps = caps_of(store.quotas()) if queued else []
    done = Admissions()
    for job_id, why in (stopped or {}).items():
        store.set_waiting(job_id, why)  # a QUEUED one's reason (a job in another state is left alone)
    for decision in plan.decisions:
        job = by_id[decision.job_id]
        if not decision.admit:
            done.waiting[job.id] = decision.reason
            for victim in decision.evict:
                done.evict[victim] = f"its chips go to job {job.id} ({admission.band_of(job.priority)} band)"
            if job.waiting_for != decision.reason:
                store.set_waiting(job.id, decision.reason)
            continue
        fits = fits_for(job, caps, now)
        to = State.RECOVERING if job.attempt > 0 else State.PENDING
        # A job that ran before goes on at once (state_since backdated, as `resume` does): its
        # wait in the queue was its backoff.
        fields = {"state_since": 0.0} if to == State.RECOVERING else {}
        if store.admit(job.id, to, "admitted: within the lab's quota", fits, **fields) is not None:
            done.admitted.append(job.id)
    return done
