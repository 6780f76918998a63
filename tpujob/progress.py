"""How far a run has got: its step and total (the heartbeat's `step` and `total`, docs/runtime.md),
the steps per second over the last minutes and the time left at that rate.

The sweep observes the step on every host each round (status.sh) and keeps a short series of
(time, step) samples on the attempt (`attempt.progress`, JSON); `list`, `show` and the dashboard
compute the rest from it here. Pure: no store, no cloud, nothing beyond the standard library
(and tpujob.durations, itself pure).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tpujob.durations import duration_text

# The rate is taken over the samples of this many seconds before the newest one: long enough to
# smooth out a checkpoint's pause, short enough to follow a run that slowed down.
WINDOW_SECONDS = 600.0
# Samples closer together than this are not kept (a `tpujob create` follows at 0.2 s a round).
MIN_SPACING_SECONDS = 10.0


@dataclass(frozen=True)
class Progress:
    step: int | None
    total: int | None
    steps_per_second: float | None  # None until two samples some seconds apart
    rate_span_seconds: float | None  # the span the rate was taken over
    seconds_left: float | None      # None without a total or a rate
    observed_at: float | None       # when the newest sample was taken

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total:
            return None
        return max(0.0, min(1.0, self.step / self.total))

    def to_json(self) -> dict:
        data = asdict(self)
        data["fraction"] = None if self.fraction is None else round(self.fraction, 4)
        if self.steps_per_second is not None:
            data["steps_per_second"] = round(self.steps_per_second, 4)
        for key in ("seconds_left", "rate_span_seconds"):
            if data[key] is not None:
                data[key] = round(data[key])
        return data


def _samples(raw: str | None) -> list[list[float]]:
    try:
        data = json.loads(raw) if raw else []
    except ValueError:
        return []  # a hand-edited store: start the series again rather than fail a sweep
    return [s for s in data if isinstance(s, list) and len(s) == 2] if isinstance(data, list) else []


def add_sample(raw: str | None, at: float, step: int) -> str:
    """The series with (at, step) added (replacing the newest when closer than the spacing, so
    the newest step is always there) and samples older than the window dropped."""
    samples = _samples(raw)
    if samples and step < samples[-1][1]:
        samples = []  # restored to an earlier step within the attempt (a NaN rollback): anew
    elif len(samples) > 1 and samples[-1][0] - samples[-2][0] < MIN_SPACING_SECONDS:
        samples.pop()  # the newest was too soon after the one before it: it moves instead
    samples.append([round(at, 1), step])
    # Keep one sample at or beyond the window's start, so the rate spans the whole window.
    while len(samples) > 2 and samples[1][0] <= at - WINDOW_SECONDS:
        samples.pop(0)
    return json.dumps(samples, separators=(",", ":"))


def progress_of(step: int | None, total: int | None, raw: str | None) -> Progress:
    samples = _samples(raw)
    rate = span = None
    if len(samples) >= 2:
        (t0, s0), (t1, s1) = samples[0], samples[-1]
        if t1 - t0 >= MIN_SPACING_SECONDS and s1 >= s0:
            rate, span = (s1 - s0) / (t1 - t0), t1 - t0
    left = None
    if rate and total is not None and step is not None:
        left = max(0, total - step) / rate
    return Progress(step=step, total=total, steps_per_second=rate, rate_span_seconds=span, seconds_left=left,
                    observed_at=samples[-1][0] if samples else None)


def of_attempt(attempt) -> Progress | None:
    """The progress of an attempt as the store keeps it (None without an attempt)."""
    if attempt is None:
        return None
    return progress_of(attempt.last_step, attempt.total_steps, attempt.progress)


def step_text(step: int | None, total: int | None) -> str:
    """`list`'s STEP column: 1250/20000, 1250 without a total, - before any step."""
    if step is None:
        return "-"
    return f"{step}/{total}" if total else str(step)


def describe(p: Progress) -> str:
    """One line for `show`: step 1250/20000 (6.2%), 3.1 steps/s, about 1h41m left."""
    if p.step is None:
        return "no step reported yet"
    parts = [f"step {step_text(p.step, p.total)}" + (f" ({p.fraction:.1%})" if p.fraction is not None else "")]
    if p.steps_per_second is not None:
        span = duration_text(p.rate_span_seconds or 0, finest="m")
        parts.append(f"{p.steps_per_second:.3g} steps/s over the last {span}")
    if p.total is not None and p.step >= p.total:
        pass  # at its total: nothing left to estimate
    elif p.seconds_left is not None:
        parts.append(f"about {duration_text(p.seconds_left, finest='m')} left")
    elif p.total is not None and p.step is not None and p.step < p.total:
        parts.append("time left unknown until the step moves")
    return ", ".join(parts)
