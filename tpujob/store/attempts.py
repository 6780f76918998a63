"""A job's attempts: opening one together with the job's move (one transaction), ending it,
and what is recorded on it as it runs (its cause, growth, create operation, host keys, steps)."""

from __future__ import annotations

import json
from typing import Any, Iterable

from sqlalchemy import and_, update
from sqlmodel import col, select

from tpujob import progress
from tpujob.errors import IllegalTransition, NotFoundError
from tpujob.names import format_job_id, node_names, nodes_text, slice_name
from tpujob.store.models import Attempt, Event, Job
from tpujob.store.states import AttemptEnd, State, is_legal
from tpujob.store.transactions import Transactions, fresh_job


class Attempts(Transactions):
    """The attempt operations of Store."""

    def start_attempt(self, job_id: int, src: State, dst: State, message: str, *, zone: str,
                      accelerator: str, queued: bool, reuse_slice: str | None = None, slices: int = 1,
                      owner: str | None = None, placement: int | None = None,
                      nodes: list[str] | None = None) -> tuple[Job, Attempt]:
        """Open the next attempt, make it the job's current one and move the job from `src` to
        `dst`, in one transaction: a crash leaves either all of it or none. Its slice is named
        after the attempt, unless `reuse_slice` names a healthy slice of an earlier attempt.
        `placement` (an index into the spec's placements) moves the job there with a `fallback`
        event, in the same transaction: a crash cannot leave the move without the attempt.
        `nodes`: an elastic attempt's own nodes (kept from the attempt before, or grown), when
        they are not NAME-0..N-1; `slices` is then their number."""
        if not is_legal(src, dst):
            raise IllegalTransition(f"job {format_job_id(job_id)}: {src.value} -> {dst.value} is not allowed")
        now = self.clock()
        tag = self.store_tag  # read before the write transaction (SQLite: one writer)
        with self._tx() as session:
            job = session.get(Job, job_id, populate_existing=True)
            if job is None:
                raise NotFoundError(f"no job {format_job_id(job_id)}")
            number = job.attempt + 1
            where = [col(Job.id) == job_id, col(Job.state) == src.value, col(Job.attempt) == job.attempt]
            if owner is not None:
                where += [col(Job.lease_owner) == owner, col(Job.lease_expires) > now]
            moved = placement is not None and placement != job.placement
            result = session.exec(update(Job).where(and_(*where)).values(
                attempt=number, zone=zone, accelerator=accelerator, state=dst.value, updated_at=now,
                state_since=now, unhealthy_since=None, end_reason=None, ended_at=None,
                **({"placement": placement} if moved else {})))
            if result.rowcount != 1:
                raise self._lost(IllegalTransition(f"job {format_job_id(job_id)} changed concurrently: "
                                                   f"cannot open attempt {number} from {src.value}"))
            if moved:
                session.add(Event(job_id=job_id, at=now, kind="fallback", message=f"moving to {accelerator} in {zone}"))
            name = reuse_slice or slice_name(job_id, number, tag)
            own = nodes if nodes is not None and list(nodes) != node_names(name, slices) else None
            listed = " ".join(own) if own else nodes_text(name, slices)
            slices_text = (f"slice {listed} ({accelerator} in {zone})" if slices == 1 else
                           f"{slices} slices {listed} ({accelerator} each, in {zone})")
            attempt = Attempt(job_id=job_id, number=number, slice_name=name, nodes=" ".join(own) if own else None,
                              zone=zone, accelerator=accelerator, queued=queued, started_at=now, slices=slices)
            session.add(attempt)
            session.add(Event(job_id=job_id, at=now, kind="attempt",
                              message=f"attempt {number}: {slices_text}"))
            session.add(Event(job_id=job_id, at=now, kind="state", from_state=src.value, to_state=dst.value,
                              message=message))
            session.flush()
            return fresh_job(session, job_id), attempt

    def end_attempt(self, job_id: int, number: int, reason: AttemptEnd | str,
                    last_step: int | None = None, lost_slices: tuple[int, ...] = ()) -> None:
        values: dict[str, Any] = dict(ended_at=self.clock(), end_reason=getattr(reason, "value", reason))
        if last_step is not None:
            values["last_step"] = last_step
        if lost_slices:
            values["lost_slices"] = ",".join(map(str, lost_slices))
        with self._tx() as session:
            session.exec(update(Attempt)
                         .where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number,
                                     col(Attempt.ended_at).is_(None)))
                         .values(**values))

    def record_cause(self, job_id: int, number: int, cause: str) -> None:
        """Why attempt `number` ended, in words (the move that ended it), for `show`."""
        with self._tx() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(cause=cause))

    def record_growing(self, job_id: int, number: int, growing: str | None) -> None:
        """The nodes being created to grow attempt `number` back (JSON; None: none)."""
        with self._tx() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(growing=growing))

    def record_create_operation(self, job_id: int, number: int, operation: str | None) -> None:
        """The operation of attempt `number`'s node create (None: forget it, to create again)."""
        with self._tx() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(create_operation=operation))

    def record_host_keys(self, job_id: int, number: int, host_keys: str) -> None:
        with self._tx() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(host_keys=host_keys))

    def record_host_user(self, job_id: int, number: int, user: str) -> None:
        """Who the attempt's program runs as on its hosts, once: the first setup's login."""
        with self._tx() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number,
                                                    col(Attempt.host_user).is_(None)))
                         .values(host_user=user))

    def record_steps(self, job_id: int, number: int, *, last_step: int | None = None,
                     resumed_from_step: int | None = None, total_steps: int | None = None,
                     at: float | None = None, reported: dict[str, int] | None = None) -> None:
        """What the runtime reported for an attempt: its latest step (a sample of the progress
        series when `at` is given), the step it resumed from, the total it runs to, and what it
        measured for the ledger (`reported`: milliseconds by name, service/ledger.Reported)."""
        values: dict[str, Any] = {k: v for k, v in (("last_step", last_step), ("resumed_from_step", resumed_from_step),
                                    ("total_steps", total_steps)) if v is not None}
        if not values and not reported:
            return
        where = and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number)
        with self._tx() as session:
            if last_step is not None and at is not None:
                (raw,) = session.exec(select(Attempt.progress).where(where)).all() or [None]
                values["progress"] = progress.add_sample(raw, at, last_step)
            if reported:  # over what was handed at launch (mtbi_ms): the program's word is newer
                (had,) = session.exec(select(Attempt.reported).where(where)).all() or [None]
                values["reported"] = json.dumps({**_json_object(had), **reported}, sort_keys=True)
            session.exec(update(Attempt).where(where).values(**values))

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._read() as session:
            return list(session.exec(select(Attempt).where(col(Attempt.job_id) == job_id)
                                     .order_by(col(Attempt.number))))

    def attempts_of(self, job_ids: Iterable[int]) -> dict[int, list[Attempt]]:
        """Every attempt of these jobs in one query: {job id: its attempts in order}."""
        ids = list(job_ids)
        found: dict[int, list[Attempt]] = {job_id: [] for job_id in ids}
        if ids:
            with self._read() as session:
                for row in session.exec(select(Attempt).where(col(Attempt.job_id).in_(ids))
                                        .order_by(col(Attempt.job_id), col(Attempt.number))):
                    found[row.job_id].append(row)
        return found

    def current_attempt(self, job_id: int) -> Attempt | None:
        with self._read() as session:
            found: Attempt | None = session.exec(select(Attempt).where(col(Attempt.job_id) == job_id)
                                                 .order_by(col(Attempt.number).desc())).first()
            return found


def _json_object(raw: str | None) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
