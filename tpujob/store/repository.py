"""The store's operations. Every state change is a compare-and-set with its event row in the
same transaction; the per-job lease makes one actor (sweep, watch, user command) act at a time.

Each method commits alone, unless called inside `with store.atomic():`, whose calls (in that
thread) share one transaction. Every timestamp comes from the store's clock (`Store(engine,
clock=...)`), so tests pin time instead of sleeping. Store is one class made of parts: the
transactions (transactions.py), leases (leases.py), attempts (attempts.py), the lab's nodes
(lab.py), and here jobs,
their moves and events."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from sqlalchemy import and_, delete, func, update
from sqlmodel import col, select

from tpujob.errors import IllegalTransition, JobLocked, NotFoundError
from tpujob.names import format_job_id
from tpujob.store import outbox
from tpujob.store.attempts import Attempts
from tpujob.store.lab import LabNodes
from tpujob.store.leases import Leases
from tpujob.store.models import Attempt, Event, Job, Quota
from tpujob.store.quotas import HOLDING, Quotas
from tpujob.store.setup_caches import SetupCaches
from tpujob.store.states import ENDED, AttemptEnd, EndReason, State, is_legal
from tpujob.store.transactions import fresh_job


class Store(Attempts, Leases, SetupCaches, LabNodes, Quotas):
    """The job store: jobs, their compare-and-set moves and events, and (inherited) the
    transactions, leases, attempts, the setup cache's digests, the lab's nodes and its quotas."""

    def add_job(self, *, name: str, spec_yaml: str, spec_json: str, accelerator: str, zone: str,
                project: str, cloud: str, keep_slice: bool = False, owner: str | None = None,
                from_node: str | None = None, priority: str = "normal", queued: bool = False) -> Job:
        """A new job: PENDING, or QUEUED (`queued`) when a lab's quota covers it."""
        now = self.clock()
        state = State.QUEUED if queued else State.PENDING
        with self._tx() as session:
            job = Job(name=name, state=state.value, priority=priority, spec_yaml=spec_yaml, spec_json=spec_json,
                      accelerator=accelerator, zone=zone, project=project, cloud=cloud,
                      keep_slice=keep_slice, created_at=now, updated_at=now, state_since=now,
                      owner=owner, from_node=from_node)
            session.add(job)
            session.flush()
            session.add(Event(job_id=job.id, at=now, kind="created", to_state=state.value,
                              message=f"job {name!r} recorded ({accelerator} in {zone}, cloud {cloud})"
                              + (f" by {owner} on {from_node}" if owner else "")))
            session.flush()
            return job

    def get(self, job_id: int) -> Job:
        with self._read() as session:
            job = session.get(Job, job_id, populate_existing=True)
            if job is None:
                raise NotFoundError(f"no job {format_job_id(job_id)}")
            return job

    def find(self, ref: str) -> Job:
        """A job by id (`42`, `000042`) or by name (the newest job of that name)."""
        ref = str(ref).strip()
        if ref.isdigit():
            return self.get(int(ref))
        with self._read() as session:
            job: Job | None = session.exec(
                select(Job).where(col(Job.name) == ref).order_by(col(Job.id).desc())).first()
        if job is None:
            raise NotFoundError(f"no job with id or name {ref!r}")
        return job

    def list_jobs(self, include_ended: bool = False, states: Iterable[State] | None = None) -> list[Job]:
        query = select(Job).order_by(col(Job.id))
        if states is not None:
            query = query.where(col(Job.state).in_([s.value for s in states]))
        elif not include_ended:
            query = query.where(col(Job.state).not_in([s.value for s in ENDED]))
        with self._read() as session:
            return list(session.exec(query))

    def jobs_ended_since(self, since: float) -> list[Job]:
        """Jobs that reached an ended state at `since` or later."""
        query = (select(Job).where(col(Job.state).in_([s.value for s in ENDED]), col(Job.ended_at) >= since)
                 .order_by(col(Job.id)))
        with self._read() as session:
            return list(session.exec(query))

    def transition(self, job_id: int, src: State, dst: State, message: str, *,
                   end_reason: EndReason | None = None, owner: str | None = None,
                   **fields: Any) -> Job:
        """Move a job from `src` to `dst` if, and only if, it is still in `src` (and, with
        `owner`, still leased to it). Raises IllegalTransition otherwise; nothing changes."""
        if not is_legal(src, dst):
            raise IllegalTransition(f"job {format_job_id(job_id)}: {src.value} -> {dst.value} is not allowed")
        if dst == State.FAILED and end_reason is None:
            raise ValueError("a FAILED job needs an end_reason")
        now = self.clock()
        values: dict[str, Any] = dict(state=dst.value, updated_at=now, state_since=now,
                      end_reason=end_reason.value if end_reason else None)
        values.update(fields)
        if src == State.RUNNING:
            # Goodput's numerator, kept as the job goes: no scan of events for `list`.
            values["running_seconds"] = col(Job.running_seconds) + (now - func.coalesce(Job.state_since, now))
        if dst in ENDED:
            values["ended_at"] = now
        elif src in ENDED:
            values["ended_at"] = None
        where = [col(Job.id) == job_id, col(Job.state) == src.value]
        if owner is not None:
            where += [col(Job.lease_owner) == owner, col(Job.lease_expires) > now]
        with self._tx() as session:
            result = session.exec(update(Job).where(and_(*where)).values(**values))
            if result.rowcount != 1:
                current = session.get(Job, job_id, populate_existing=True)
                if current is None:
                    raise NotFoundError(f"no job {format_job_id(job_id)}")
                if owner is not None and current.state == src.value:
                    raise self._lost(JobLocked(f"job {format_job_id(job_id)} is no longer leased to {owner}"))
                raise self._lost(IllegalTransition(
                    f"job {format_job_id(job_id)} is {current.state}, not {src.value}: "
                    f"cannot move it to {dst.value}"))
            text = message if end_reason is None else f"{message} ({end_reason.value})"
            event = Event(job_id=job_id, at=now, kind="state", from_state=src.value,
                          to_state=dst.value, message=text)
            session.add(event)
            session.flush()
            outbox.enqueue(session, job_id, event.id, dst, fields, text, now)
            return fresh_job(session, job_id)

    def holding_jobs(self) -> list[Job]:
        """The jobs that hold chips now: every active job but the QUEUED ones (HOLDING), and the
        ended jobs that keep their slice at Google (one cancelled while its attempt ran, for
        `resume`, and keep_slice ones): a slice holds the project's quota until it is deleted."""
        cancel_kept = (select(Attempt.id).where(col(Attempt.job_id) == col(Job.id),
                                                col(Attempt.number) == col(Job.attempt),
                                                col(Attempt.end_reason) == AttemptEnd.CANCELLED.value).exists())
        kept = and_(col(Job.attempt) > 0, and_(col(Job.state) == State.CANCELLED.value, cancel_kept) | and_(
            col(Job.keep_slice), col(Job.state).in_([State.SUCCEEDED.value, State.FAILED.value])))
        query = select(Job).where(col(Job.state).in_([s.value for s in HOLDING]) | kept).order_by(col(Job.id))
        with self._read() as session:
            return list(session.exec(query))

    def admit(self, job_id: int, to: State, message: str, fits: Callable[[list[Job]], bool],
              **fields: Any) -> Job | None:
        """Move a QUEUED job to `to` (PENDING, or RECOVERING for one that ran before) if `fits`
        still says so of the jobs holding chips as this transaction reads them; None if not (the
        job stays QUEUED). One transaction per decision: SQLite's write transaction (BEGIN
        IMMEDIATE) and, on PostgreSQL, a lock on every quota row serialise the admissions of all
        sweeps, so two never both count the same free chips. Another sweep's admission of this
        very job loses the compare-and-set: None."""
        try:
            with self.atomic():
                with self._tx() as session:
                    if session.get_bind().dialect.name == "postgresql":
                        session.exec(select(Quota).with_for_update()).all()
                holding = self.holding_jobs()
                if not fits(holding):
                    return None
                return self.transition(job_id, State.QUEUED, to, message, waiting_for=None, **fields)
        except (IllegalTransition, JobLocked):
            return None

    def update(self, job_id: int, **fields: Any) -> None:
        """Plain field updates (counters, host ip, observed_at) that are not state changes."""
        with self._tx() as session:
            session.exec(update(Job).where(col(Job.id) == job_id).values(**fields))

    def mark_observed(self, job_ids: list[int], at: float) -> None:
        """One statement for a whole sweep: when its slices were last looked at."""
        if not job_ids:
            return
        with self._tx() as session:
            session.exec(update(Job).where(col(Job.id).in_(job_ids)).values(observed_at=at))

    def add_event(self, job_id: int, kind: str, message: str) -> None:
        with self._tx() as session:
            session.add(Event(job_id=job_id, at=self.clock(), kind=kind, message=message))

    def remove(self, job_id: int) -> None:
        """Forget a job entirely (`clean`): its events and attempts go with it."""
        with self._tx() as session:
            outbox.remove_for(session, job_id)
            session.exec(delete(Event).where(col(Event.job_id) == job_id))
            session.exec(delete(Attempt).where(col(Attempt.job_id) == job_id))
            session.exec(delete(Job).where(col(Job.id) == job_id))

    def events(self, job_id: int) -> list[Event]:
        with self._read() as session:
            return list(session.exec(select(Event).where(col(Event.job_id) == job_id).order_by(col(Event.id))))


def open_store(url: str, clock: Callable[[], float] | None = None) -> Store:
    """The store at `url`, its timestamps on `clock`: by default the store server's
    (store/clock.py), which every node of a lab shares whatever its own clock says."""
    from tpujob.store.clock import StoreClock
    from tpujob.store.db import engine_for

    engine = engine_for(url)
    return Store(engine, clock=clock or StoreClock(engine))
