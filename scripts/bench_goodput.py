#!/usr/bin/env python3
"""A simulated week of a lab's spot jobs over a 3-zone market: goodput per dollar of
(a) static: the spec's zones in their written order, a fixed checkpoint interval (30 minutes);
(b) auto: `placement: auto` and `checkpoint_every: auto`, learned from the week's own history;
(c) oracle: the zone with the longest true time between interruptions at each attempt, and
    Young's interval for the true save cost and the true mean time between interruptions.

A discrete-event driver over tpujob's own decision code, every decision made at its time with
only what the store would hold by then (each attempt's rows as of that time: a slice still
running counts its exposure so far, as `history` reads an open attempt):
- reconcile/history.py (`samples_of`: the attempts and events read as evidence) and
  reconcile/risk.py (`ordered`, as service/goodput.py's `auto_placement` calls it at create;
  `prior_mtbi` and `Evidence.mtbi`, as reconcile/act.py's `_hand_mtbi` reads M at each attempt);
- reconcile/placement.py (`following` after a capacity miss, `after_interruption` after a
  preemption);
- runtime/spacing.py (`Spacing`, as the bundled runtime spaces its saves: 60 s until its first
  save is measured, then Young's for that stall and the M it was handed);
- service/ledger.py: each job's attempts and events as the store keeps them, put through the
  ledger; the bench prints how far its buckets are from each job's wall time.

The market (seeded): each zone has a mean time between interruptions, a stockout chance and a
mean wait for capacity, dealt to the zones at random per seed (so the spec's first zone is as
likely the best as the worst), drifting with the time of day and a slow random walk. One price
for all three zones (one accelerator, one provisioning), so goodput per dollar is the share of
paid time that trained, per dollar. Paid: a slice from READY to its end (a request waiting for
capacity is not billed).

    scripts/bench_goodput.py [--seeds 1 2 3] [--days 7] [--static-minutes 30] [--detail]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tpujob.reconcile import placement as placing
from tpujob.reconcile.history import samples_of
from tpujob.reconcile.risk import Evidence, Key, checkpoint_seconds, evidence, ordered, prior_mtbi
from tpujob.runtime.spacing import Spacing
from tpujob.service.ledger import job_ledger

DAY = 86400.0
ZONES = ["us-east5-a", "us-east5-b", "us-west4-a"]  # the spec's written order
ACC, PROVISIONING = "v5litepod-8", "spot"
PRICE = 9.6  # USD per slice-hour, the same in every zone
SLOTS = 4  # jobs the lab runs at once
WORK = 12 * 3600.0  # training seconds each job needs
# The static arm's `checkpoint_every` (the steps that take it), unless --static-minutes: a user
# with no measure of C or M writes a round half hour, inside Google's advice to save "approximately
# every hour" (cloud.google.com/tpu/docs/prepare-for-maintenance); docs/goodput.md says why.
STATIC_INTERVAL = 30 * 60.0
RESTART = 10 * 60.0  # paid per attempt before training: setup, compile and restore
STOCKOUT_WAIT = 10 * 60.0  # a request that meets a stockout fails after this (not paid)
POLICIES = ("static", "auto", "oracle")


@dataclass
class Market:
    """Per zone: base MTBI (s), stockout chance, mean wait (s); drift by day and by a walk."""
    mtbi: list[float]
    stockout: list[float]
    wait: list[float]
    phase: list[float]
    walk: list[list[float]]  # one factor per 12 hours

    @classmethod
    def seeded(cls, seed: int) -> Market:
        rng = random.Random(f"market-{seed}")  # a string seed: small ints deal alike at first
        mtbi = [h * 3600 for h in (0.75, 4.0, 16.0)]
        stockout = [0.05, 0.2, 0.4]
        wait = [300.0, 1200.0, 3600.0]
        for values in (mtbi, stockout, wait):
            rng.shuffle(values)
        walk = []
        for _ in ZONES:
            level, steps = 1.0, []
            for _ in range(15):
                steps.append(level)
                level *= math.exp(rng.gauss(0, 0.2))
            walk.append(steps)
        return cls(mtbi, stockout, wait, [rng.uniform(0, 2 * math.pi) for _ in ZONES], walk)

    def mtbi_at(self, z: int, t: float) -> float:
        day = math.exp(0.4 * math.sin(2 * math.pi * t / DAY + self.phase[z]))
        return self.mtbi[z] * day * self.walk[z][min(14, int(t // 43200))]


@dataclass
class Zone:
    """Where one policy's paid seconds went in one zone."""
    attempts: int = 0
    stockouts: int = 0
    interruptions: int = 0
    restart: float = 0.0  # paid before training: setup, compile, restore
    checkpoint: float = 0.0  # saves
    lost: float = 0.0  # trained past the last checkpoint, then interrupted (or the week ended)
    kept: float = 0.0  # trained and kept
    intervals: list[float] = field(default_factory=list)  # the interval each attempt settled on

    @property
    def paid(self) -> float:
        return self.restart + self.checkpoint + self.lost + self.kept


@dataclass
class Totals:
    zones: list[Zone] = field(default_factory=lambda: [Zone() for _ in ZONES])
    jobs: int = 0
    worst_gap: float = 0.0  # largest |sum of a job's ledger buckets - its wall time| / wall
    firsts: list[tuple[float, int]] = field(default_factory=list)  # (created, the first zone chosen)

    @property
    def useful(self) -> float:
        return sum(z.kept for z in self.zones)

    @property
    def paid(self) -> float:
        return sum(z.paid for z in self.zones)

    @property
    def per_dollar(self) -> float:
        return self.useful / 3600 / (self.paid / 3600 * PRICE) if self.paid else 0.0

    def add(self, other: Totals) -> None:
        for mine, theirs in zip(self.zones, other.zones):
            for name in ("attempts", "stockouts", "interruptions", "restart", "checkpoint", "lost", "kept"):
                setattr(mine, name, getattr(mine, name) + getattr(theirs, name))
            mine.intervals += theirs.intervals
        self.jobs += other.jobs
        self.worst_gap = max(self.worst_gap, other.worst_gap)


def _as_of(attempt: SimpleNamespace, now: float) -> SimpleNamespace:
    """An attempt's row as the store held it at `now`: still open if it ended later."""
    if attempt.ended_at is not None and attempt.ended_at <= now:
        return attempt
    return SimpleNamespace(**{**vars(attempt), "ended_at": None, "end_reason": None})


class Lab:
    """One policy's week: every job's attempts and events (the store), the slots' jobs."""

    def __init__(self, policy: str, market: Market, seed: int, week: float, static: float = STATIC_INTERVAL):
        self.policy, self.market, self.week_end, self.static = policy, market, week, static
        # Common random numbers: every policy meets the same draws, a stream per kind of draw
        # and zone (the n-th request to a zone meets the same stockout coin and wait in every
        # policy's week, the n-th job the same save cost), so the ratios compare the policies,
        # not one week's luck against another's.
        self.streams: dict[str, random.Random] = {}
        self.seed = seed
        self.settled: list = []  # the samples of jobs that ended: they no longer change
        self.open: list[list] = []  # [ends, attempts, events] of the others (ends: the week's until known)
        self.totals = Totals()

    def history(self, now: float) -> dict[Key, Evidence]:
        """The store's evidence at `now` (reconcile/history.py reads it so)."""
        still = []
        for ends, attempts, events in self.open:
            if ends <= now:
                self.settled += samples_of(attempts, events, PROVISIONING, now)
            else:
                still.append([ends, attempts, events])
        self.open = still
        samples = list(self.settled)
        for _, attempts, events in self.open:
            seen = [_as_of(a, now) for a in attempts if a.started_at <= now]
            samples += samples_of(seen, [e for e in events if e.at <= now], PROVISIONING, now)
        return evidence(samples)

    def draw(self, kind: str) -> random.Random:
        if kind not in self.streams:
            self.streams[kind] = random.Random(f"{self.seed}-{kind}")
        return self.streams[kind]

    def order(self, t: float) -> list[int]:
        """The job's placements at create: as written, or service/goodput.auto_placement's."""
        if self.policy != "auto":
            return list(range(len(ZONES)))
        places = [(ACC, z) for z in ZONES]
        return [c.index for c in ordered(places, PROVISIONING, self.history(t), lambda a: PRICE)]

    def spacing(self, z: int, t: float, true_save: float) -> Spacing | float:
        """How the attempt's program spaces its saves: a fixed interval (seconds), or the
        bundled runtime's `checkpoint_every: auto`."""
        if self.policy == "static":
            return self.static
        if self.policy == "oracle":
            return checkpoint_seconds(true_save, self.market.mtbi_at(z, t))
        # reconcile/act.py _hand_mtbi: M for this placement from the store at the attempt's start
        found = self.history(t)
        m = found.get(Key(ZONES[z], ACC, PROVISIONING), Evidence()).mtbi(prior_mtbi(found, ACC, PROVISIONING))
        return Spacing(None, m)

    def job(self, start: float):
        """One job from `start`: a generator that yields the time of its next decision (a new
        attempt), and returns when it ended."""
        market, week, draw = self.market, self.week_end, self.draw
        true_save = draw("save").uniform(30, 120)  # the model's checkpoint cost, seconds
        attempts: list = []
        events: list = [SimpleNamespace(at=start, to_state="PENDING")]
        entry = [week, attempts, events]
        self.open.append(entry)
        order = self.order(start)
        self.totals.firsts.append((start, order[0]))
        t, idx, kept, misses = start, 0, 0.0, 0
        while kept < WORK and t < week:
            if self.policy == "oracle":
                by_mtbi = sorted(range(len(ZONES)), key=lambda k: (-market.mtbi_at(k, t), k))
                z = by_mtbi[misses % len(ZONES)]
            else:
                z = order[idx]
            where = self.totals.zones[z]
            where.attempts += 1
            spacing = self.spacing(z, t, true_save)
            events.append(SimpleNamespace(at=t, to_state="PROVISIONING"))
            attempt = SimpleNamespace(number=len(attempts) + 1, started_at=t, ended_at=None, end_reason=None,
                                      accelerator=ACC, zone=ZONES[z], slices=1, last_step=None,
                                      resumed_from_step=None, progress=None, reported=None)
            attempts.append(attempt)
            if draw(f"stockout-{z}").random() < market.stockout[z]:
                t += STOCKOUT_WAIT
                attempt.ended_at, attempt.end_reason = t, "no_capacity"
                events.append(SimpleNamespace(at=t, to_state="RECOVERING"))
                where.stockouts += 1
                misses += 1
                if self.policy != "oracle":
                    idx = placing.following(idx, len(ZONES), frozenset())
                yield t
                continue
            misses = 0
            ready = t + draw(f"wait-{z}").expovariate(1 / market.wait[z])
            events.append(SimpleNamespace(at=ready, to_state="SETTING_UP"))
            life = draw(f"life-{z}").expovariate(1 / market.mtbi_at(z, ready))  # READY to the interruption
            end_at = min(ready + life, week)
            resumed = kept
            reached, saving = kept, 0.0
            t = min(ready + RESTART, end_at)
            where.restart += t - ready
            if t < end_at:
                events.append(SimpleNamespace(at=t, to_state="RUNNING"))
                while kept < WORK:
                    tau = spacing.interval if isinstance(spacing, Spacing) else spacing
                    seg = min(tau, WORK - kept)
                    if t + seg + true_save > end_at:  # interrupted before this save ended
                        trained = max(0.0, min(seg, end_at - t))
                        reached = kept + trained
                        where.lost += end_at - t
                        break
                    t += seg + true_save
                    kept = reached = kept + seg
                    where.kept += seg
                    where.checkpoint += true_save
                    saving += true_save
                    if isinstance(spacing, Spacing):
                        spacing.saved(true_save * draw("measure").uniform(0.9, 1.1))  # the runtime's measure
                if kept >= WORK:
                    end_at = t
                t = end_at
            where.intervals.append(spacing.interval if isinstance(spacing, Spacing) else spacing)
            interrupted = kept < WORK and t < week
            attempt.ended_at = t
            attempt.end_reason = "preempted" if interrupted else ("succeeded" if kept >= WORK else "cancelled")
            # a "step" is a training second: the ledger counts the steps redone after a resume
            attempt.last_step, attempt.resumed_from_step = int(reached), int(resumed)
            attempt.reported = f'{{"checkpoint_ms": {int(saving * 1000)}, "step_ms": 1000}}'
            if interrupted:
                where.interruptions += 1
                events.append(SimpleNamespace(at=t, to_state="RECOVERING"))
                idx = placing.after_interruption(idx, auto=self.policy == "auto")
                yield t
        end = min(t, week)
        entry[0] = end
        events.append(SimpleNamespace(at=end, to_state="SUCCEEDED" if kept >= WORK else "CANCELLED"))
        self.totals.jobs += 1
        led = job_ledger(SimpleNamespace(created_at=start, ended_at=end), attempts, events, end, lambda a: PRICE)
        gap = abs(sum(led.buckets.values()) - led.wall_seconds) / max(1e-9, led.wall_seconds)
        self.totals.worst_gap = max(self.totals.worst_gap, gap)
        return end

    def run(self) -> Totals:
        """The slots' jobs, every decision in time order across them."""
        queue = [(0.0, slot, self.job(0.0)) for slot in range(SLOTS)]
        heapq.heapify(queue)
        while queue:
            _, slot, job = heapq.heappop(queue)
            try:
                at = next(job)
            except StopIteration as done:
                at = done.value
                if at >= self.week_end:
                    continue
                job = self.job(at)
            heapq.heappush(queue, (at, slot, job))
        return self.totals


def detail(policy: str, got: Totals) -> list[str]:
    lines = []
    for name, z in zip(ZONES, got.zones):
        if not z.attempts:
            continue
        tau = sum(z.intervals) / len(z.intervals) / 60 if z.intervals else 0.0
        paid = z.paid / 3600
        lines.append(f"    {policy:<7} {name}: {z.attempts} attempts ({z.stockouts} stockouts, "
                     f"{z.interruptions} interruptions)  paid {paid:.0f}h = restart {z.restart / 3600:.0f}h "
                     f"+ checkpoint {z.checkpoint / 3600:.0f}h + lost {z.lost / 3600:.0f}h "
                     f"+ kept {z.kept / 3600:.0f}h ({z.kept / z.paid if z.paid else 0:.0%})  interval {tau:.0f}m")
    if policy == "auto":
        firsts = Counter(ZONES[z] for _, z in got.firsts)
        lines.append(f"    auto    jobs created with each first zone: {dict(firsts)}")
        changes, last = [], None
        for at, z in got.firsts:
            if z != last:
                changes.append(f"{at / 3600:.0f}h {ZONES[z]}")
                last = z
        lines.append(f"    auto    first zone at create, as it changed: {', '.join(changes)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--days", type=float, default=7.0, help="the simulated span (default a week)")
    parser.add_argument("--static-minutes", type=float, default=STATIC_INTERVAL / 60,
                        help="the static arm's fixed checkpoint interval (default 30)")
    parser.add_argument("--detail", action="store_true",
                        help="per zone: attempts, where the paid hours went, the interval")
    args = parser.parse_args()
    sums = {p: Totals() for p in POLICIES}
    for seed in args.seeds:
        market = Market.seeded(seed)
        traits = ", ".join(f"{z}: MTBI {m / 3600:.1f}h stockout {s:.0%}"
                           for z, m, s in zip(ZONES, market.mtbi, market.stockout))
        print(f"seed {seed}: {traits}")
        got = {}
        for policy in POLICIES:
            got[policy] = Lab(policy, market, seed, args.days * DAY, args.static_minutes * 60).run()
            g = got[policy]
            taus = [tau for z in g.zones for tau in z.intervals]
            mean_tau = sum(taus) / len(taus) / 60 if taus else 0.0
            print(f"  {policy:<7} {g.per_dollar:.4f} training h/$  {g.jobs} jobs  "
                  f"trained {g.useful / 3600:.0f}h  paid {g.paid / 3600:.0f}h  "
                  f"interval {mean_tau:.0f}m  ledger off wall by at most {g.worst_gap:.2%}")
            if args.detail:
                print("\n".join(detail(policy, g)))
            sums[policy].add(g)
        a, b, c = (got[p].per_dollar for p in POLICIES)
        print(f"  seed {seed}: auto/static {b / a:.2f}, auto/oracle {b / c:.2f}, oracle/static {c / a:.2f}")
    a, b, c = (sums[p].per_dollar for p in POLICIES)
    print(f"goodput per dollar: auto/static {b / a:.2f}, auto/oracle {b / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
