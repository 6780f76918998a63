"""The lab's scheduler at a lab's size (docs/scheduler.md): a simulated lab driven through the
scheduler's own decision code, and the sweep's admission step timed on a real store.

Part 1, the lab (a discrete-time loop, one tick per sweep): --users users (every fourth one with
weight 2) submit --jobs jobs of mixed sizes (4, 8, 16 or 32 v5e chips; 1 to 4 h of work), in
bands (each user's jobs: one in 15 high, 4 or 8 chips for 15 to 60 min, arriving over the first
two days; nine normal and five low, queued at the start),
under one --quota chip cap. Each sweep calls `reconcile/admission.plan` exactly as the real sweep
does: evictions are stopped with their grace (--grace seconds, the checkpoint taken at the stop),
then the plan is made again and its admissions provision (--provisioning seconds) before their
first step. Preemptions are injected (--preempt-per-hour per running job): a preempted job keeps
its chips (RECOVERING), loses the work since its last periodic checkpoint and provisions again.
Cost caps: one job in ten has a max_cost of 70 % of what its work costs, and five users a daily
budget of 60 % of an even share of the lab's spend; each sweep calls `reconcile/spending.stops`
first, as the real sweep does, and a job it stops ends (a user over budget has their queued jobs
wait). The lab's ground truth checks every admission against the cap.

Part 2, the store: --jobs jobs recorded QUEUED in a SQLite store, the cap filled, then the sweep's
admission step (`reconcile/scheduling.admit_queued`: the plan, each waiting job's reason, one
transaction per admission) timed at that size (median of --runs).

Prints: admissions (creates) over the quota; Jain's fairness index over the weighted chip-hours
of the users without a budget, while every one of them still had normal or high work queued
(fair share orders jobs within a band; a band above is served first, whoever owns it); each
high-band job's wait from submission to its first step when lower bands had to be evicted,
against one sweep + grace + provisioning; work an evicted job lost beyond its last checkpoint;
each cost cap's overshoot against that job's (or user's) spend in one sweep; the admission
step's duration.

    .venv/bin/python scripts/bench_lab.py [--users 20] [--jobs 300] [--quota 64] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpujob.reconcile import admission, spending
from tpujob.reconcile.admission import Cap, Demand, Holder, Waiter

FAMILY, REGION = "v5e", "us-west4"
SIZES = (4, 4, 8, 8, 8, 16, 16, 32)
CHECKPOINT_EVERY = 1800.0  # the program's periodic checkpoint, in seconds of work
# How long the program's checkpoint on SIGTERM takes (the bundled runtime saves at the next step):
# within the grace, an evicted job keeps all its work; past it, only its last periodic checkpoint.
SIGTERM_SAVE_SECONDS = 20.0
USD_PER_CHIP_HOUR = 1.20  # v5e on demand (tpujob/catalogue.py)


@dataclass
class SimJob:
    id: int
    owner: str
    band: str
    chips: int
    work: float  # seconds of work it needs
    submit: float
    state: str = "future"  # future | queued | provisioning | running | done
    progress: float = 0.0
    checkpoint: float = 0.0
    ready_at: float = 0.0
    running_since: float = 0.0
    first_step: float | None = None
    evictions: int = 0
    evicted_for: bool = False  # a high job whose admission needed evictions
    lost_by_eviction: float = 0.0
    max_cost: float | None = None
    spends: list[spending.Spend] = field(default_factory=list)  # one per stretch of holding chips
    holding_since: float | None = None

    @property
    def usd_per_hour(self) -> float:
        return self.chips * USD_PER_CHIP_HOUR

    def hold(self, at: float) -> None:
        if self.holding_since is None:
            self.holding_since = at

    def release(self, at: float) -> None:
        if self.holding_since is not None:
            self.spends.append(spending.Spend(self.id, self.owner, self.usd_per_hour, self.holding_since, at))
            self.holding_since = None

    def spend_records(self) -> list[spending.Spend]:
        running = [] if self.holding_since is None else [
            spending.Spend(self.id, self.owner, self.usd_per_hour, self.holding_since, None)]
        return self.spends + running

    def demand(self) -> Demand:
        return Demand(FAMILY, REGION, "spot", self.chips)


@dataclass
class Lab:
    jobs: list[SimJob]
    cap: Cap
    weights: dict[str, float]
    usage: dict[str, float] = field(default_factory=dict)  # decayed chip-hours, per owner
    # Chip-hours held per owner while every user still had work queued (until drained_at: when
    # the first of them ran out).
    held_hours: dict[str, float] = field(default_factory=dict)
    drained_at: float = math.inf
    over_quota: int = 0
    plan_seconds: list[float] = field(default_factory=list)
    budgets: dict[str, spending.Cap] = field(default_factory=dict)
    # Each stop by a cost cap: (dollars over the cap, that job's or user's spend in one sweep).
    overshoots: list[tuple[float, float]] = field(default_factory=list)

    def holding(self) -> list[SimJob]:
        return [j for j in self.jobs if j.state in ("provisioning", "running")]


# Each user's jobs in turn: one high in 15, nine normal, five low. Every user has the same mix, so
# that the bands (served first, whoever owns the job) leave the users' shares to fair share.
MIX = ("high",) + ("normal", "low") * 5 + ("normal",) * 4


def make_lab(users: int, jobs: int, quota: int, rng: random.Random, budget_users: int = 5) -> Lab:
    owners = [f"user{i:02d}" for i in range(users)]
    made = []
    for i in range(jobs):
        band = MIX[(i // users) % len(MIX)]
        if band == "high":  # urgent and short (an evaluation), while the lab is busy: its first two days
            made.append(SimJob(i + 1, owners[i % users], band, rng.choice((4, 8)), rng.uniform(900, 3600),
                               rng.uniform(3600, 48 * 3600)))
        else:
            made.append(SimJob(i + 1, owners[i % users], band, rng.choice(SIZES), rng.uniform(3600, 4 * 3600), 0.0))
    for j in made[::10]:  # one job in ten capped at 70 % of what its work costs
        j.max_cost = round(0.7 * j.usd_per_hour * j.work / 3600, 2)
    # A few users on a daily budget under their fair share of the lab's spend (64 chips a day).
    daily = 0.6 * quota * USD_PER_CHIP_HOUR * 24 / users
    budgets = {o: spending.Cap(round(daily, 2), "day") for o in owners[1::users // budget_users or 1][:budget_users]}
    return Lab(made, Cap(FAMILY, REGION, "", quota), {o: 2.0 for o in owners[::4]}, budgets=budgets)


def simulate(lab: Lab, *, sweep: float, grace: float, provisioning: float, preempt_per_hour: float,
             rng: random.Random) -> None:
    """Run the lab to its end."""
    t = 0.0
    users = {j.owner for j in lab.jobs} - set(lab.budgets)  # a budget caps its user's share by design
    half_life = admission.HALF_LIFE_HOURS * 3600
    while any(j.state != "done" for j in lab.jobs):
        t += sweep
        # The sweep interval passes: work, preemptions, slices coming up, usage.
        decay = 2 ** (-sweep / half_life)
        for owner in lab.usage:
            lab.usage[owner] *= decay
        for j in lab.holding():
            lab.usage[j.owner] = lab.usage.get(j.owner, 0.0) + j.chips * sweep / 3600
            if t <= lab.drained_at:
                lab.held_hours[j.owner] = lab.held_hours.get(j.owner, 0.0) + j.chips * sweep / 3600
            if j.state == "provisioning" and t >= j.ready_at:
                j.state, j.running_since = "running", j.ready_at
                if j.first_step is None:
                    j.first_step = j.ready_at
            if j.state != "running":
                continue
            ran = min(sweep, t - j.running_since)
            if rng.random() < preempt_per_hour * ran / 3600:
                j.progress = j.checkpoint  # lost since the last checkpoint; the job keeps its chips
                j.state, j.ready_at = "provisioning", t + provisioning
                continue
            j.progress += ran
            j.checkpoint = math.floor(j.progress / CHECKPOINT_EVERY) * CHECKPOINT_EVERY
            if j.progress >= j.work:
                j.state = "done"
                j.release(j.running_since + j.work - (j.progress - ran))
        for j in lab.jobs:
            if j.state == "future" and j.submit <= t:
                j.state = "queued"
        # Fair share orders the jobs within a band; a band above is served first, whoever owns
        # it. So the shares are compared while every user still had work queued in the band the
        # lab mostly serves (normal, or high above it).
        if lab.drained_at == math.inf and {j.owner for j in lab.jobs if j.state in ("queued", "future")
                                           and j.band != "low"} & users < users:
            lab.drained_at = t
        # The sweep: cost caps, then plan, evict (the grace), plan again, admit.
        over_budget = _budget_stops(lab, t, sweep)
        decisions = _plan(lab, t, over_budget)
        victims = {v for d in decisions for v in d.evict}
        waiting_on_evictions = {d.job_id for d in decisions if d.evict}
        now = t
        if victims:
            now = t + grace
            for j in lab.jobs:
                if j.id in victims:
                    if SIGTERM_SAVE_SECONDS <= grace:  # the checkpoint signal: saved within the grace
                        j.checkpoint = j.progress
                    j.lost_by_eviction += j.progress - j.checkpoint
                    j.state, j.evictions, j.progress = "queued", j.evictions + 1, j.checkpoint
                    j.release(now)
            decisions = _plan(lab, now, over_budget)
        by_id = {j.id: j for j in lab.jobs}
        for d in decisions:
            if not d.admit:
                continue
            j = by_id[d.job_id]
            held = sum(h.chips for h in lab.holding())
            if held + j.chips > lab.cap.chips:
                lab.over_quota += 1
            j.state, j.ready_at = "provisioning", now + provisioning
            j.hold(now)
            if j.id in waiting_on_evictions and j.first_step is None:
                j.evicted_for = True


def _budget_stops(lab: Lab, now: float, sweep: float) -> set[str]:
    """spending.stops over the lab as the sweep calls it: the jobs a cap stops end (failed,
    after their checkpoint); returns the users over budget, whose queued jobs wait."""
    holding = lab.holding()
    day = spending.period_start("day", now)
    spends = [s for j in lab.jobs if j.owner in lab.budgets or j.max_cost is not None
              for s in j.spend_records() if s.ended is None or s.ended > day]
    stopped = spending.stops({j.id: (j.owner, j.max_cost) for j in holding}, spends, lab.budgets, now)
    over = set(spending.owners_over(spends, lab.budgets, now))
    for j in holding:
        if j.id not in stopped:
            continue
        if j.max_cost is not None and stopped[j.id].startswith("max_cost"):
            spent = spending.cost([s for s in spends if s.job_id == j.id], now)
            lab.overshoots.append((spent - j.max_cost, j.usd_per_hour * sweep / 3600))
        else:
            cap = lab.budgets[j.owner]
            mine = [s for s in spends if s.owner == j.owner]
            rate = sum(h.usd_per_hour for h in holding if h.owner == j.owner)
            lab.overshoots.append((spending.cost(mine, now, day) - cap.dollars, rate * sweep / 3600))
        j.state = "done"
        j.release(now)
    return over


def _plan(lab: Lab, now: float, over_budget: set[str]) -> list[admission.Decision]:
    holders = [Holder(j.id, j.owner, j.band, j.demand(),
                      running_seconds=now - j.running_since if j.state == "running" else None)
               for j in lab.holding()]
    waiters = [Waiter(j.id, j.owner, j.band, j.demand(), queued_at=j.submit)
               for j in lab.jobs if j.state == "queued" and j.owner not in over_budget]
    started = time.perf_counter()
    plan = admission.plan(waiters, holders, [lab.cap], usage=lab.usage, weights=lab.weights)
    lab.plan_seconds.append(time.perf_counter() - started)
    return plan.decisions


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if values else 1.0


def time_admission_step(jobs: int, quota: int, runs: int, rng: random.Random) -> list[float]:
    """The real admission step (store reads, plan, reasons, transactions) on a SQLite store."""
    from tpujob import spec as spec_mod
    from tpujob.reconcile.scheduling import admit_queued
    from tpujob.store.repository import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'lab.db'}")
        store.set_quota(FAMILY, quota, region=REGION)
        specs = {}
        for size in sorted(set(SIZES)):
            text = (f"name: bench\ntpu: {{accelerator: v5litepod-{size}, zone: {REGION}-a}}\n"
                    "run: {command: train}\n")
            parsed, lines = spec_mod.parse(text)
            specs[size] = (text, spec_mod.resolve(parsed, lines, default_project="bench"))
        for i in range(jobs):
            text, resolved = specs[rng.choice(SIZES)]
            store.add_job(name=f"job-{i}", spec_yaml=text, spec_json=json.dumps(resolved.to_json_dict()),
                          accelerator=resolved.accelerator, zone=resolved.zone, project="bench", cloud="local",
                          owner=f"user{i % 20:02d}", priority=rng.choice(admission.BANDS), queued=True)
        admit_queued(store)  # fills the cap: later steps admit nothing, as in a busy lab
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            admit_queued(store)
            took.append(time.perf_counter() - started)
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--quota", type=int, default=64)
    parser.add_argument("--sweep", type=float, default=60.0, help="seconds between sweeps")
    parser.add_argument("--grace", type=float, default=30.0, help="an evicted job's stop grace, seconds")
    parser.add_argument("--provisioning", type=float, default=120.0, help="a slice's create to first step")
    parser.add_argument("--preempt-per-hour", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    lab = make_lab(args.users, args.jobs, args.quota, rng)
    simulate(lab, sweep=args.sweep, grace=args.grace, provisioning=args.provisioning,
             preempt_per_hour=args.preempt_per_hour, rng=rng)
    bound = args.sweep + args.grace + args.provisioning
    high = [j for j in lab.jobs if j.band == "high" and j.evicted_for and j.first_step is not None]
    every_high = [j.first_step - j.submit for j in lab.jobs if j.band == "high" and j.first_step is not None]
    waits = [j.first_step - j.submit for j in high]  # type: ignore[operator]
    print(f"lab: {args.users} users, {args.jobs} jobs, {args.quota} {FAMILY} chips, sweep {args.sweep:.0f} s, "
          f"grace {args.grace:.0f} s, provisioning {args.provisioning:.0f} s, seed {args.seed}")
    print(f"creates over quota: {lab.over_quota}")
    owners = sorted({j.owner for j in lab.jobs} - set(lab.budgets))
    index = jain([lab.held_hours.get(o, 0.0) / lab.weights.get(o, 1.0) for o in owners])
    print(f"Jain's index over the weighted chip-hours of the {len(owners)} users without a budget, the "
          f"{lab.drained_at / 3600:.1f} h every one of them had work queued in band normal or high: {index:.3f}")
    print(f"high-band jobs that evicted: {len(high)}; submission to first step: max {max(waits, default=0):.0f} s, "
          f"median {statistics.median(waits) if waits else 0:.0f} s; within one sweep + grace + provisioning "
          f"({bound:.0f} s): {sum(w <= bound for w in waits)}/{len(waits)}")
    print(f"every high-band job, submission to first step: max {max(every_high, default=0):.0f} s, "
          f"median {statistics.median(every_high) if every_high else 0:.0f} s over {len(every_high)}")
    print(f"evictions: {sum(j.evictions for j in lab.jobs)}; work lost by evicted jobs beyond their last "
          f"checkpoint: {sum(j.lost_by_eviction for j in lab.jobs):.0f} s")
    print(f"plan (pure) per sweep: median {statistics.median(lab.plan_seconds) * 1000:.1f} ms, "
          f"max {max(lab.plan_seconds) * 1000:.1f} ms over {len(lab.plan_seconds)} plans")
    took = time_admission_step(args.jobs, args.quota, args.runs, rng)
    print(f"sweep's admission step on a SQLite store, {args.jobs} jobs: median {statistics.median(took) * 1000:.0f} ms "
          f"(of {args.runs})")
    worst = max(lab.overshoots, key=lambda o: o[0] / o[1] if o[1] else 0.0, default=(0.0, 0.0))
    print(f"cost caps reached: {len(lab.overshoots)} ({len(lab.budgets)} users on a daily budget, "
          f"{sum(j.max_cost is not None for j in lab.jobs)} jobs with max_cost); largest overshoot "
          f"${worst[0]:.2f} = {worst[0] / worst[1] if worst[1] else 0:.2f} of that sweep's spend ${worst[1]:.2f}; "
          f"over one sweep's spend: {sum(o > s + 1e-9 for o, s in lab.overshoots)}")


if __name__ == "__main__":
    main()
