#!/usr/bin/env python3
"""A simulated week of a lab's spot jobs over a 3-zone market: goodput per dollar of
(a) static: the spec's zones in their written order, a fixed checkpoint interval (30 minutes);
(b) auto: `placement: auto` and `checkpoint_every: auto`, learned from the week's own history;
(c) oracle: the zone with the longest true time between interruptions at each attempt, and
    Young's interval for the true save cost and the true mean time between interruptions.

A discrete-event driver over tpujob's own pure decision code: reconcile/risk.py (evidence,
placement order, Young's interval) and reconcile/placement.py (the next placement after a
capacity miss). Each policy lives its own week with its own history, starting cold. Each job's
attempts and events are laid out as the store keeps them and put through service/ledger.py: the
bench prints how far the ledger's buckets are from each job's wall time.

The market (seeded): each zone has a mean time between interruptions, a stockout chance and a
mean wait for capacity, dealt to the zones at random per seed (so the spec's first zone is as
likely the best as the worst), drifting with the time of day and a slow random walk. One price
for all three zones (one accelerator, one provisioning), so goodput per dollar is the share of
paid time that trained, per dollar.

    scripts/bench_goodput.py [--seeds 1 2 3] [--jobs-per-slot N]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tpujob.reconcile import placement as placing  # noqa: E402
from tpujob.reconcile.risk import Key, Sample, checkpoint_seconds, evidence, ordered  # noqa: E402
from tpujob.service.ledger import job_ledger  # noqa: E402

WEEK = 7 * 86400.0
ZONES = ["us-east5-a", "us-east5-b", "us-west4-a"]  # the spec's written order
ACC, PROVISIONING = "v5litepod-8", "spot"
PRICE = 9.6  # USD per slice-hour, the same in every zone
SLOTS = 4  # jobs the lab runs at once
WORK = 12 * 3600.0  # training seconds each job needs
STATIC_INTERVAL = 30 * 60.0  # a round, common choice: every half hour
RESTART = 10 * 60.0  # paid per attempt before training: provisioning, setup, compile, restore
FIRST_SAVE_GUESS = 60.0  # the save cost auto assumes before the runtime measured one
STOCKOUT_WAIT = 10 * 60.0  # a request that meets a stockout fails after this (not paid)


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
        day = math.exp(0.4 * math.sin(2 * math.pi * t / 86400 + self.phase[z]))
        return self.mtbi[z] * day * self.walk[z][min(14, int(t // 43200))]


@dataclass
class Totals:
    useful: float = 0.0  # training seconds kept
    paid: float = 0.0  # slice seconds paid
    jobs: int = 0
    worst_gap: float = 0.0  # largest |sum of a job's ledger buckets - its wall time| / wall
    intervals: list[float] = field(default_factory=list)

    @property
    def per_dollar(self) -> float:
        return self.useful / 3600 / (self.paid / 3600 * PRICE) if self.paid else 0.0


class Lab:
    """One policy's week: the shared history (every attempt as evidence), the jobs."""

    def __init__(self, policy: str, market: Market, seed: int):
        self.policy, self.market = policy, market
        self.rng = random.Random(seed * 7919 + 1)
        self.samples: list[Sample] = []
        self.saves: list[float] = []  # save costs the runtime measured
        self.totals = Totals()

    def order(self, t: float) -> list[int]:
        if self.policy != "auto":
            return list(range(len(ZONES)))
        places = [(ACC, z) for z in ZONES]
        found = evidence(self.samples)
        return [c.index for c in ordered(places, PROVISIONING, found, lambda a: PRICE,
                                         save_seconds=self.save_cost(), restart_seconds=RESTART)]

    def save_cost(self) -> float:
        return sum(self.saves) / len(self.saves) if self.saves else FIRST_SAVE_GUESS

    def interval(self, z: int, t: float, true_save: float) -> float:
        if self.policy == "static":
            return STATIC_INTERVAL
        if self.policy == "oracle":
            return checkpoint_seconds(true_save, self.market.mtbi_at(z, t))
        found = evidence(self.samples)
        key = Key(ZONES[z], ACC, PROVISIONING)
        from tpujob.reconcile.risk import Evidence, prior_mtbi

        m = found.get(key, Evidence()).mtbi(prior_mtbi(found, ACC, PROVISIONING))
        return checkpoint_seconds(self.save_cost(), m)

    def run_job(self, start: float) -> float:
        """One job from `start` to its end (or the week's); returns when it ended."""
        rng, market = self.rng, self.market
        true_save = rng.uniform(30, 120)  # the model's checkpoint cost, seconds
        order = self.order(start)
        t, idx, kept, measured = start, 0, 0.0, False
        attempts, events = [], [SimpleNamespace(at=start, to_state="PENDING")]
        misses = 0
        while kept < WORK and t < WEEK:
            if self.policy == "oracle":
                z = max(range(len(ZONES)), key=lambda k: (market.mtbi_at(k, t), -k))
                if misses:
                    z = sorted(range(len(ZONES)), key=lambda k: -market.mtbi_at(k, t))[misses % len(ZONES)]
            else:
                z = order[idx]
            number = len(attempts) + 1
            events.append(SimpleNamespace(at=t, to_state="PROVISIONING"))
            attempt = SimpleNamespace(number=number, started_at=t, ended_at=None, end_reason=None,
                                      accelerator=ACC, zone=ZONES[z], slices=1, last_step=None,
                                      resumed_from_step=None, progress=None, reported=None)
            attempts.append(attempt)
            if rng.random() < market.stockout[z]:
                t += STOCKOUT_WAIT
                attempt.ended_at, attempt.end_reason = t, "no_capacity"
                self.samples.append(Sample(Key(ZONES[z], ACC, PROVISIONING), STOCKOUT_WAIT, False, 0.0, False))
                events.append(SimpleNamespace(at=t, to_state="RECOVERING"))
                misses += 1
                if self.policy != "oracle":
                    idx = placing.following(idx, len(ZONES), frozenset())
                continue
            misses = 0
            waited = rng.expovariate(1 / market.wait[z])
            t += waited
            ready = t
            events.append(SimpleNamespace(at=t, to_state="SETTING_UP"))
            life = rng.expovariate(1 / market.mtbi_at(z, t))  # from READY to the interruption
            end_at = min(ready + life, WEEK)
            # paid: setup, compile and restore first
            restart_end = ready + RESTART
            tau = self.interval(z, ready, true_save)
            self.totals.intervals.append(tau)
            progress, reached, ckpt_time = kept, kept, 0.0
            resumed = kept
            if restart_end >= end_at:
                t = end_at
            else:
                events.append(SimpleNamespace(at=restart_end, to_state="RUNNING"))
                t = restart_end
                while progress < WORK:
                    seg = min(tau, WORK - progress)
                    if t + seg + true_save > end_at:
                        reached = progress + min(seg, max(0.0, end_at - t))  # lost past the checkpoint
                        break
                    t += seg + true_save
                    progress += seg
                    kept = reached = progress
                    ckpt_time += true_save
                    if not measured:
                        self.saves.append(true_save * rng.uniform(0.9, 1.1))  # the runtime's measure
                        measured = True
                if progress >= WORK:
                    end_at = t
                t = end_at
            interrupted = kept < WORK and t < WEEK
            self.samples.append(Sample(Key(ZONES[z], ACC, PROVISIONING), waited, True, t - ready, interrupted))
            attempt.ended_at = t
            attempt.end_reason = "preempted" if interrupted else ("succeeded" if kept >= WORK else "cancelled")
            # a "step" is a training second: the ledger counts the steps redone after a resume
            attempt.last_step = int(reached)
            attempt.resumed_from_step = int(resumed)
            attempt.reported = f'{{"checkpoint_ms": {int(ckpt_time * 1000)}, "step_ms": 1000}}'
            self.totals.paid += t - ready
            if interrupted:
                events.append(SimpleNamespace(at=t, to_state="RECOVERING"))
                if self.policy == "auto":
                    idx = placing.after_interruption(idx, auto=True)
        self.totals.useful += min(kept, WORK)
        self.totals.jobs += 1
        end = min(t, WEEK)
        events.append(SimpleNamespace(at=end, to_state="SUCCEEDED" if kept >= WORK else "CANCELLED"))
        job = SimpleNamespace(created_at=start, ended_at=end)
        led = job_ledger(job, attempts, events, end, lambda a: PRICE)
        gap = abs(sum(led.buckets.values()) - led.wall_seconds) / max(1e-9, led.wall_seconds)
        self.totals.worst_gap = max(self.totals.worst_gap, gap)
        return end

    def week(self) -> Totals:
        # the slots' jobs interleaved in time, so each job's create sees the history so far
        clocks = [0.0] * SLOTS
        while min(clocks) < WEEK:
            slot = clocks.index(min(clocks))
            clocks[slot] = self.run_job(clocks[slot]) if clocks[slot] < WEEK else WEEK
        return self.totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    sums = {p: Totals() for p in ("static", "auto", "oracle")}
    for seed in args.seeds:
        market = Market.seeded(seed)
        traits = ", ".join(f"{z}: MTBI {m / 3600:.1f}h stockout {s:.0%}"
                           for z, m, s in zip(ZONES, market.mtbi, market.stockout))
        print(f"seed {seed}: {traits}")
        for policy in sums:
            got = Lab(policy, market, seed).week()
            mean_tau = sum(got.intervals) / len(got.intervals) / 60 if got.intervals else 0.0
            print(f"  {policy:<7} {got.per_dollar:.4f} training h/$  {got.jobs} jobs  "
                  f"trained {got.useful / 3600:.0f}h  paid {got.paid / 3600:.0f}h  "
                  f"interval {mean_tau:.0f}m  ledger off wall by at most {got.worst_gap:.2%}")
            total = sums[policy]
            total.useful += got.useful
            total.paid += got.paid
    a, b, c = (sums[p].per_dollar for p in ("static", "auto", "oracle"))
    print(f"goodput per dollar: auto/static {b / a:.2f}, auto/oracle {b / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
