"""Where a job's wall time and dollars went: one bucket per cause, adding up to the wall time.

Pure: the store's attempts and events, and what the runtime reported of each attempt (the
attempt's `reported` column, `Reported`), in; seconds and dollars per bucket out. The wall time
[created_at, ended_at or now] is cut into the job's state spans (`timeline.state_spans`); each
span goes whole to one bucket, except a RUNNING span, which is split by what the runtime
measured, the rest of it being training. So the buckets add up to the wall time by construction
(up to float rounding), and a bucket the program did not report is "not reported", never guessed:
a RUNNING span of a program that reports nothing stays one `running` bucket.

Buckets (docs/goodput.md says what each rests on):
  waiting       no slice: before the first request, and a request that never got one
                (a stockout, a queue that timed out, a refusal)
  provisioning  a request that got its slice, until the slice was READY
  setup         SETTING_UP: disks, sync, the job's setup (cache hit or miss)
  compile, restore, checkpoint   RUNNING, as the runtime measured them
  lost_work     RUNNING, redoing the steps the attempt before computed past its last checkpoint
                (its last step - this attempt's resumed step, at this attempt's step time)
  hung          RUNNING after the last progress the store saw, on an attempt that ended hung
  training      the rest of RUNNING, where the runtime reported; `running` where it did not
  recovering    RECOVERING: the backoff between an attempt's end and the next request
  stopped       after the job ended (cancelled, failed or succeeded and not yet ended_at)

Dollars: a bucket's seconds inside an attempt's life [started_at, ended_at] cost that attempt's
price (catalogue, the spec's provisioning) times its slices; `waiting` never costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from tpujob.reconcile.placement import NO_SLICE
from tpujob.runtime.contract import Reported
from tpujob.service.timeline import state_spans
from tpujob.store.states import AttemptEnd

BUCKETS = ("waiting", "provisioning", "setup", "compile", "restore", "training", "lost_work",
           "checkpoint", "hung", "running", "recovering", "stopped")
REPORTED = ("compile", "restore", "checkpoint", "lost_work")  # only the runtime knows these
_FREE = frozenset({"waiting", "stopped"})
_STATE_BUCKET = {"PENDING": "waiting", "SETTING_UP": "setup", "RECOVERING": "recovering",
                 "SUCCEEDED": "stopped", "FAILED": "stopped", "CANCELLED": "stopped", "DELETED": "stopped"}


@dataclass(frozen=True)
class Ledger:
    start: float
    end: float
    buckets: dict[str, float] = field(default_factory=dict)  # every name of BUCKETS, seconds
    dollars: dict[str, float | None] = field(default_factory=dict)  # None: no published price
    not_reported: tuple[str, ...] = ()  # REPORTED buckets no runtime report backs

    @property
    def wall_seconds(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict:
        return {"wall_seconds": round(self.wall_seconds, 3),
                "buckets": {k: round(v, 3) for k, v in self.buckets.items()},
                "dollars": {k: None if v is None else round(v, 4) for k, v in self.dollars.items()},
                "not_reported": list(self.not_reported)}


Price = Callable[[str], float | None]  # accelerator -> USD per slice-hour at the job's provisioning


def _hung_from(attempt) -> float | None:
    """When an attempt that ended hung last moved: its last progress sample (progress.py)."""
    if attempt.end_reason != AttemptEnd.HUNG.value or not attempt.progress:
        return None
    try:
        samples = json.loads(attempt.progress)
        return float(samples[-1][0]) if samples else None
    except (ValueError, TypeError, IndexError):
        return None


def job_ledger(job, attempts, events, now: float, price: Price, *, lo: float | None = None,
           hi: float | None = None) -> Ledger:
    """The job's ledger over [lo, hi] (default: its whole wall time); `attempts` oldest first.
    An attempt's own ledger is the job's over its row (`attempt_ledgers`)."""
    end = max(job.ended_at or now, job.created_at)
    lo = job.created_at if lo is None else lo
    hi = end if hi is None else min(hi, end)
    buckets = dict.fromkeys(BUCKETS, 0.0)
    dollars: dict[str, float | None] = dict.fromkeys(BUCKETS, 0.0)
    reports = {a.number: Reported.parse(getattr(a, "reported", None)) for a in attempts}
    unreported: set[str] = set()

    def owner(at: float):
        found = None
        for a in attempts:
            if a.started_at <= at:
                found = a
        return found

    def add(bucket: str, seconds: float, attempt, at: float) -> None:
        if seconds <= 0:
            return
        buckets[bucket] += seconds
        if bucket in _FREE or attempt is None or dollars[bucket] is None:
            return
        # only the part inside the attempt's life has a slice to pay for
        life_end = attempt.ended_at if attempt.ended_at is not None else end
        paid = max(0.0, min(at + seconds, life_end) - max(at, attempt.started_at))
        p = price(attempt.accelerator)
        if p is None:
            dollars[bucket] = None
        else:
            dollars[bucket] = (dollars[bucket] or 0.0) + p * attempt.slices * paid / 3600

    # the spans of each state, cut again at every attempt's start, so each piece has one owner
    cuts = sorted({a.started_at for a in attempts if lo < a.started_at < hi})
    pieces = []
    for span in state_spans(events, job.created_at, end):
        edges = [span.start] + [c for c in cuts if span.start < c < span.end] + [span.end]
        pieces += [(span.state, a, b) for a, b in zip(edges, edges[1:])]
    first = pieces[0][1] if pieces else end
    if first > job.created_at:  # before the first event (none yet): waiting
        pieces.insert(0, ("PENDING", job.created_at, first))
    ran: dict[int, float] = {}  # RUNNING seconds split so far, per attempt: the split fills from the start
    for state, a, b in pieces:
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        attempt = owner(a)
        if state == "PROVISIONING":
            got_slice = attempt is not None and attempt.end_reason not in NO_SLICE
            add("provisioning" if got_slice else "waiting", b - a, attempt, a)
        elif state == "RUNNING" and attempt is not None:
            _split_running(attempt, attempts, reports, a, b, add, unreported, ran)
        else:
            add(_STATE_BUCKET.get(state, "running"), b - a, attempt, a)
    return Ledger(lo, hi, buckets, dollars, tuple(sorted(unreported)))


def _split_running(attempt, attempts, reports, a: float, b: float, add, unreported: set[str],
                   ran: dict[int, float]) -> None:
    """A RUNNING piece [a, b] of `attempt`: hung after its last progress; the measured parts
    in the order the runtime spends them (restore, compile, lost work, then checkpoints); the
    rest training (or `running` when the program reported nothing)."""
    hung_at = _hung_from(attempt)
    if hung_at is not None and hung_at < b:
        cut = max(a, hung_at)
        add("hung", b - cut, attempt, cut)
        b = cut
    if b <= a:
        return
    report = reports.get(attempt.number)
    if report is None or not report.measured:  # only the M tpujob handed it: nothing said
        unreported.update(REPORTED)
        add("running", b - a, attempt, a)
        return
    before = [x for x in attempts if x.number < attempt.number and x.last_step is not None]
    redone = 0
    if before and attempt.resumed_from_step is not None:
        redone = max(0, before[-1].last_step - attempt.resumed_from_step)
    lost = redone * report.step if report.step is not None else 0.0
    if redone and report.step is None:
        unreported.add("lost_work")
    parts = (("restore", report.restore), ("compile", report.compile), ("lost_work", lost),
             ("checkpoint", report.checkpoint))
    # the piece's place in the attempt's running time: the parts already counted are not again
    done = ran.get(attempt.number, 0.0)
    at, left, offset = a, b - a, 0.0
    for name, seconds in parts:
        share = max(0.0, min(seconds - max(0.0, done - offset), left))
        offset += seconds
        add(name, share, attempt, at)
        at += share
        left -= share
    add("training", left, attempt, at)
    ran[attempt.number] = done + (b - a)


def attempt_ledgers(job, attempts, events, now: float, price: Price) -> list[tuple[int, Ledger]]:
    """One ledger per attempt, over its row: from its start to the next attempt's (or the job's
    end), as the timeline draws it, so the recovery after it is on it."""
    end = max(job.ended_at or now, job.created_at)
    out = []
    for i, attempt in enumerate(attempts):
        row_end = attempts[i + 1].started_at if i + 1 < len(attempts) else end
        out.append((attempt.number, job_ledger(job, attempts, events, now, price, lo=attempt.started_at,
                                           hi=max(row_end, attempt.started_at))))
    return out


def add_up(ledgers: list[Ledger]) -> tuple[float, dict[str, float], dict[str, float | None]]:
    """Several ledgers together (a report's group): wall seconds, seconds and dollars per bucket."""
    wall = sum(x.wall_seconds for x in ledgers)
    seconds = {k: sum(x.buckets.get(k, 0.0) for x in ledgers) for k in BUCKETS}
    dollars: dict[str, float | None] = {}
    for k in BUCKETS:
        values = [x.dollars.get(k) for x in ledgers]
        dollars[k] = None if any(v is None for v in values) else sum(v or 0.0 for v in values)
    return wall, seconds, dollars


def price_of(provisioning: str) -> Price:
    """The catalogue's USD per slice-hour of an accelerator at `provisioning` (None where Google
    publishes none: no estimate passed off as a price)."""
    from tpujob.catalogue import accelerator

    return lambda name: accelerator(name).price_for(provisioning)
