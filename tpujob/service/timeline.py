"""A job's life as bars: one per attempt (one per slice of a multislice attempt), split by the
job's state over time, with the moments that ended attempts marked (a preemption, a NaN restart;
on a multislice attempt, on the slices it lost). What `show --timeline` and the
dashboard draw; the store's attempts and events are its only source. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.names import attempt_nodes
from tpujob.store.states import AttemptEnd

# Why an attempt ended that a reader looks for on the timeline.
MARKED = {AttemptEnd.PREEMPTED.value: "preempted", AttemptEnd.NAN.value: "nan"}


@dataclass(frozen=True)
class Span:
    state: str
    start: float
    end: float


@dataclass(frozen=True)
class Bar:
    """One attempt's row: from its start to the next attempt's (or the job's end, or now), so
    the recovery after it is drawn on it."""
    attempt: int
    slice_name: str
    zone: str
    start: float
    end: float
    end_reason: str | None
    spans: tuple[Span, ...]
    slice: int | None = None  # of a multislice attempt, the slice this row is (slice_name: its node)


@dataclass(frozen=True)
class Mark:
    at: float
    kind: str  # "preempted" | "nan"
    attempt: int
    slice: int | None = None  # of a multislice attempt: a slice it lost (every slice where not known)


@dataclass(frozen=True)
class Timeline:
    start: float  # the job's creation
    end: float  # its end, or now
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]

    @property
    def seconds(self) -> float:
        return max(1e-9, self.end - self.start)


def state_spans(events, start: float, end: float) -> list[Span]:
    """The job's state over [start, end] from its events' moves (each lasts until the next)."""
    moves = [(e.at, e.to_state) for e in events if e.to_state]
    spans = []
    for (at, state), nxt in zip(moves, moves[1:] + [(end, None)]):
        lo, hi = max(at, start), min(nxt[0], end)
        if hi > lo:
            spans.append(Span(state, lo, hi))
    return spans


def timeline(job, attempts, events, now: float) -> Timeline:
    end = max(job.ended_at or now, job.created_at)
    spans = state_spans(events, job.created_at, end)
    bars, marks = [], []
    for i, attempt in enumerate(attempts):
        row_end = attempts[i + 1].started_at if i + 1 < len(attempts) else end
        row_end = max(row_end, attempt.started_at)
        clipped = tuple(Span(s.state, max(s.start, attempt.started_at), min(s.end, row_end))
                        for s in spans if s.end > attempt.started_at and s.start < row_end)
        rows: list[int | None] = list(range(attempt.slices)) if attempt.slices > 1 else [None]
        nodes = attempt_nodes(attempt)
        for k in rows:
            name = attempt.slice_name if k is None else nodes[k]
            bars.append(Bar(attempt.number, name, attempt.zone, attempt.started_at, row_end,
                            attempt.end_reason, clipped, slice=k))
        if attempt.end_reason in MARKED and attempt.ended_at is not None:
            lost = [int(k) for k in (attempt.lost_slices or "").split(",") if k]
            for k in (lost or rows) if attempt.slices > 1 else rows:
                marks.append(Mark(attempt.ended_at, MARKED[attempt.end_reason], attempt.number, slice=k))
    return Timeline(job.created_at, end, tuple(bars), tuple(marks))


def attempt_at(bars, at: float) -> int | None:
    """The attempt whose row holds the moment `at` (a metrics line's time), None before the first."""
    found = None
    for bar in bars:
        if bar.start <= at:
            found = bar.attempt
    return found
