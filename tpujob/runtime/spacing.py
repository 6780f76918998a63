"""How far apart checkpoints are: a fixed number of steps, or `checkpoint_every: auto`, Young's
interval sqrt(2*C*M) for the save cost C this program measured and the mean time between
interruptions M the orchestrator measured for the slice's zone, accelerator and provisioning
(handed in TPUJOB_MTBI_SECONDS; reconcile/risk.py). J. W. Young, "A first order approximation
to the optimum checkpoint interval", CACM 17(9), 1974; J. T. Daly, FGCS 22(3), 2006, keeps it
for C << M. Pure: the loop asks `due` after each step and tells `saved` each save's stall."""

from __future__ import annotations

import math

MIN_INTERVAL_S = 60.0  # a save more often than this costs more than the work it keeps
MAX_INTERVAL_S = 6 * 3600.0  # whatever the history says, never more than this at risk
# Without a measured M (a program run by hand, a store with no history), the mean time between
# interruptions assumed: a day, the "24 hour run time limit of preemptible TPUs"
# (cloud.google.com/tpu/docs/preemptible); "Spot VMs are preemptible at any time"
# (cloud.google.com/tpu/docs/spot-compute), with no figure at all.
DEFAULT_MTBI_S = 24 * 3600.0


def young_seconds(save_seconds: float, mtbi: float, *, lo: float = MIN_INTERVAL_S,
                  hi: float = MAX_INTERVAL_S) -> float:
    """Young's interval sqrt(2*C*M), held in [lo, hi]."""
    return min(hi, max(lo, math.sqrt(2 * max(0.0, save_seconds) * max(0.0, mtbi))))


class Spacing:
    """When to save. `every` steps when fixed; with `auto` (every None), after `interval`
    seconds of training since the last save: MIN_INTERVAL_S until a save was measured (so C is
    measured early), then Young's for the newest save's stall."""

    def __init__(self, every: int | None, mtbi: float | None = None):
        self.every = every
        self.mtbi = mtbi if mtbi and mtbi > 0 else DEFAULT_MTBI_S
        self.save_seconds: float | None = None  # the newest save's stall (C)
        self.interval = MIN_INTERVAL_S

    def due(self, step: int, since_save: float) -> bool:
        """Whether to save after `step`, `since_save` seconds of training after the last save."""
        if self.every is not None:
            return step % self.every == 0
        return since_save >= self.interval

    def saved(self, stall: float) -> None:
        """A save blocked training `stall` seconds: C, and the interval from it."""
        self.save_seconds = stall
        self.interval = young_seconds(stall, self.mtbi)
