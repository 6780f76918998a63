"""The measured risk of a placement, and the two decisions made from it. Pure.

From the store's own records, per (zone, accelerator, provisioning) (`Key`): how long a request
waited for capacity and how often a running slice was interrupted (`Evidence`, with how many
observations back each). From those:

- `checkpoint_seconds`: the checkpoint interval that loses the least to saves and to work redone,
  Young's first-order optimum sqrt(2*C*M) (J. W. Young, "A first order approximation to the
  optimum checkpoint interval", CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the
  optimum checkpoint interval for restart dumps", FGCS 22(3), 2006, which keeps it for C << M),
  for the save cost C the runtime measured and the mean time between interruptions M, bounded.
- `ordered`: a spec's placements by expected goodput per dollar (`goodput_per_dollar`), the
  spec's order where the evidence does not tell them apart (a cold start keeps it).

docs/goodput.md gives the formulas and what each number rests on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

from tpujob.runtime.spacing import DEFAULT_MTBI_S, MAX_INTERVAL_S, MIN_INTERVAL_S, young_seconds


class Key(NamedTuple):
    zone: str
    accelerator: str
    provisioning: str


@dataclass(frozen=True)
class Sample:
    """One attempt as the evidence counts it: how long it waited for its slice (from its request
    to READY, or to its end where it never got one), whether it got one, how long the slice ran
    (READY to the attempt's end, or now), and whether it ended interrupted (preempted)."""
    key: Key
    waited: float
    got_slice: bool
    ran: float
    interrupted: bool


@dataclass(frozen=True)
class Evidence:
    waited: float = 0.0  # seconds waited for capacity, all requests together
    capacity: int = 0  # requests that got a slice
    requests: int = 0
    ran: float = 0.0  # seconds slices ran (the exposure to interruptions)
    interruptions: int = 0
    runs: int = 0  # attempts whose slice ran

    @property
    def expected_wait(self) -> float | None:
        """Seconds a request waits for capacity: all waiting over the times capacity came
        (a renewal estimate); None before capacity came once."""
        return self.waited / self.capacity if self.capacity else None

    @property
    def interruption_rate(self) -> float | None:
        """Interruptions per second of a running slice; None before any slice ran."""
        return self.interruptions / self.ran if self.ran > 0 else None

    def mtbi(self, prior: float) -> float:
        """Mean seconds between interruptions, shrunk toward `prior` (the lab-wide mean for the
        accelerator and provisioning) as one pseudo-interruption: with no history it is the prior,
        and a zone that never interrupted in a short run is not taken for one that never will."""
        return (self.ran + prior) / (self.interruptions + 1)


def evidence(samples: Iterable[Sample]) -> dict[Key, Evidence]:
    out: dict[Key, Evidence] = {}
    for s in samples:
        e = out.get(s.key, Evidence())
        out[s.key] = Evidence(waited=e.waited + s.waited, capacity=e.capacity + s.got_slice,
                              requests=e.requests + 1, ran=e.ran + (s.ran if s.got_slice else 0.0),
                              interruptions=e.interruptions + (s.interrupted and s.got_slice),
                              runs=e.runs + s.got_slice)
    return out


# Without any history, the mean time between interruptions assumed (the runtime's own default,
# a day: the prior a history has to argue down), and the bounds of the interval: one formula,
# the runtime's, shipped to the hosts and used here.
PRIOR_MTBI = DEFAULT_MTBI_S
MIN_INTERVAL = MIN_INTERVAL_S
MAX_INTERVAL = MAX_INTERVAL_S


def prior_mtbi(found: dict[Key, Evidence], accelerator: str, provisioning: str) -> float:
    """The lab-wide mean time between interruptions for an accelerator and provisioning, over
    every zone; PRIOR_MTBI where none ran yet."""
    ran = sum(e.ran for k, e in found.items() if (k.accelerator, k.provisioning) == (accelerator, provisioning))
    stops = sum(e.interruptions for k, e in found.items()
                if (k.accelerator, k.provisioning) == (accelerator, provisioning))
    return (ran + PRIOR_MTBI) / (stops + 1)


def checkpoint_seconds(save_seconds: float, mtbi: float, *, lo: float = MIN_INTERVAL,
                       hi: float = MAX_INTERVAL) -> float:
    """Young's interval sqrt(2*C*M), held in [lo, hi] (runtime/spacing.py's)."""
    return young_seconds(save_seconds, mtbi, lo=lo, hi=hi)


def checkpoint_steps(interval_seconds: float, step_seconds: float) -> int:
    """The interval in steps of `step_seconds` (at least 1)."""
    return max(1, round(interval_seconds / step_seconds)) if step_seconds > 0 else 1


def useful_fraction(save_seconds: float, mtbi: float, restart_seconds: float, interval: float) -> float:
    """The share of a slice's paid time that is training, checkpointing every `interval` seconds
    with saves of `save_seconds`, interrupted every `mtbi` seconds on average, each interruption
    costing `restart_seconds` paid before training again (provisioning, setup, compile, restore)
    and half an interval of work redone: the first-order model Young's optimum minimises."""
    if mtbi <= 0:
        return 0.0
    per_second = save_seconds / (interval + save_seconds)  # saves
    lost = (interval / 2 + restart_seconds) / mtbi  # redone work and the restart, per interruption
    return max(0.0, 1.0 - per_second - lost)


def goodput_per_dollar(save_seconds: float, mtbi: float, restart_seconds: float, price: float) -> float:
    """Training seconds per dollar at the best interval for this risk."""
    interval = checkpoint_seconds(save_seconds, mtbi)
    return useful_fraction(save_seconds, mtbi, restart_seconds, interval) / price * 3600 if price > 0 else 0.0


@dataclass(frozen=True)
class Choice:
    index: int  # into the spec's placements
    score: float | None  # training seconds per dollar; None: no price
    mtbi: float
    evidence: Evidence
    useful: float = 0.0  # the share of paid time that trains, at the best interval


def ordered(placements: list[tuple[str, str]], provisioning: str, found: dict[Key, Evidence],
            price: Callable[[str], float | None], *, save_seconds: float = 60.0,
            restart_seconds: float = 600.0) -> list[Choice]:
    """The placements ([(accelerator, zone)], the spec's order) best first by expected goodput
    per dollar (by the share of paid time that trains where a price is not published: Google
    publishes no spot price for some generations). A placement that waited and never got
    capacity goes last; the spec's order decides ties, so with no history at all (every MTBI
    the prior) it is kept."""
    choices = []
    for i, (accelerator, zone) in enumerate(placements):
        e = found.get(Key(zone, accelerator, provisioning), Evidence())
        m = e.mtbi(prior_mtbi(found, accelerator, provisioning))
        p = price(accelerator)
        score = None if p is None else goodput_per_dollar(save_seconds, m, restart_seconds, p)
        useful = useful_fraction(save_seconds, m, restart_seconds, checkpoint_seconds(save_seconds, m))
        choices.append(Choice(i, score, m, e, useful))
    priced = all(c.score is not None for c in choices)

    def rank(c: Choice) -> tuple[bool, float, int]:
        starved = c.evidence.requests > 0 and c.evidence.capacity == 0
        return (starved, -(c.score or 0.0) if priced else -c.useful, c.index)

    return sorted(choices, key=rank)
