"""The notification outbox: rows written in the same transaction as the state move they tell
about (so a committed move is never left untold, and an undone one never told), then claimed by
compare-and-set, sent, and marked, by whichever sweep comes first (service/notify.py).

A row names the channel by its index in the job's spec (`notify[i]`): the outbox never holds an
address or a webhook URL.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from sqlalchemy import ColumnElement, and_, delete, or_, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from tpujob.errors import NotFoundError
from tpujob.names import format_job_id
from tpujob.store.models import Event, Job, Outbox
from tpujob.store.states import Counter, State

PENDING, SENT, GAVE_UP = "pending", "sent", "gave_up"
# Tries before a row is given up (with an event on the job); the wait before try n+1 is
# BACKOFF_SECONDS * 2**(n-1), at most MAX_BACKOFF_SECONDS: about 2 hours in all.
MAX_TRIES = 8
BACKOFF_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 1800.0
MAX_ERROR_CHARS = 300

_KIND_OF_END = {State.SUCCEEDED: "succeeded", State.FAILED: "failed", State.CANCELLED: "cancelled"}
_KIND_OF_COUNT: tuple[tuple[Counter, str], ...] = (("nan_restarts", "nan"), ("preemptions", "preempted"))


def kind_of(dst: State, fields: dict[str, Any]) -> str | None:
    """The notification kind of a move, if it is one: an end, or a move to RECOVERING that
    counts a preemption or a NaN restart (the counters arrive as fields of the move; `resume`
    resets them to 0, which counts nothing)."""
    if dst in _KIND_OF_END:
        return _KIND_OF_END[dst]
    if dst == State.RECOVERING:
        for counter, kind in _KIND_OF_COUNT:
            value = fields.get(counter)
            if isinstance(value, int) and value > 0:
                return kind
    return None


def enqueue(session: Session, job_id: int, event_id: int, dst: State, fields: dict[str, Any], message: str,
            now: float) -> None:
    """Inside Store.transition's transaction: one row per channel of the job's spec that asked
    for this kind of move."""
    kind = kind_of(dst, fields)
    if kind is None:
        return
    job = session.get(Job, job_id)
    if job is None:
        raise NotFoundError(f"no job {format_job_id(job_id)}")
    from tpujob.spec.stored import spec_of  # the spec's models: only when a move may notify

    channels = spec_of(job).spec.notify
    text = f"tpujob: job {format_job_id(job_id)} {job.name!r} {dst.value}: {message}"
    for index, channel in enumerate(channels):
        if kind in channel.on:
            session.add(Outbox(job_id=job_id, event_id=event_id, channel=index, kind=kind, text=text,
                               status=PENDING, created_at=now, next_try=now))


class Outboxes:
    """The sending side: due rows, claims, outcomes."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.clock = clock

    def due(self, limit: int) -> list[Outbox]:
        now = self.clock()
        with Session(self.engine) as session:
            return list(session.exec(
                select(Outbox).where(col(Outbox.status) == PENDING, col(Outbox.next_try) <= now, _unclaimed(now))
                .order_by(col(Outbox.id)).limit(limit)))

    def claim(self, row_id: int, owner: str, ttl_seconds: float) -> bool:
        """Take the row for one send; False when another sweep has it, or it is no longer due."""
        now = self.clock()
        with Session(self.engine) as session:
            result = session.exec(update(Outbox).where(and_(
                col(Outbox.id) == row_id, col(Outbox.status) == PENDING, col(Outbox.next_try) <= now, _unclaimed(now)))
                .values(claimed_by=owner, claim_expires=now + ttl_seconds))
            session.commit()
            return result.rowcount == 1

    def sent(self, row_id: int, owner: str) -> None:
        with Session(self.engine) as session:
            session.exec(update(Outbox).where(col(Outbox.id) == row_id, col(Outbox.claimed_by) == owner)
                         .values(status=SENT, sent_at=self.clock(), claimed_by=None, claim_expires=None,
                                 attempts=col(Outbox.attempts) + 1))
            session.commit()

    def failed(self, row: Outbox, owner: str, error: str) -> bool:
        """Record a failed try; the next one waits longer. True when this was the last try (the
        row is given up, with an event on the job saying so)."""
        now = self.clock()
        tries = row.attempts + 1
        error = error[:MAX_ERROR_CHARS]
        give_up = tries >= MAX_TRIES
        wait = min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** (tries - 1))
        with Session(self.engine) as session:
            mine = (col(Outbox.id) == row.id, col(Outbox.claimed_by) == owner)
            result = session.exec(update(Outbox).where(*mine).values(
                attempts=tries, last_error=error, next_try=now + wait, claimed_by=None, claim_expires=None,
                status=GAVE_UP if give_up else PENDING))
            if give_up and result.rowcount == 1:
                session.add(Event(job_id=row.job_id, at=now, kind="notify",
                                  message=f"gave up notifying notify[{row.channel}] of {row.kind} "
                                          f"after {tries} tries: {error}"))
            session.commit()
        return give_up

    def rows(self, job_id: int) -> list[Outbox]:
        with Session(self.engine) as session:
            return list(session.exec(select(Outbox).where(col(Outbox.job_id) == job_id).order_by(col(Outbox.id))))


def _unclaimed(now: float) -> ColumnElement[bool]:
    return or_(col(Outbox.claimed_by).is_(None), col(Outbox.claim_expires) <= now)


def remove_for(session: Session, job_id: int) -> None:
    """With the job (`clean`): its notifications go too."""
    session.exec(delete(Outbox).where(col(Outbox.job_id) == job_id))
