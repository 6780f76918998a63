"""The store's operations. Every state change is a compare-and-set with its event row in the
same transaction; the per-job lease makes one actor (sweep, watch, user command) act at a time.

Each method commits alone, unless called inside `with store.atomic():`, whose calls (in that
thread) share one transaction. Every timestamp comes from the store's clock (`Store(engine,
clock=...)`), so tests pin time instead of sleeping."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from sqlalchemy import and_, delete, func, or_, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from tpujob import progress
from tpujob.errors import IllegalTransition, JobLocked, NotFoundError
from tpujob.names import format_job_id, node_names, nodes_text, slice_name
from tpujob.store import outbox
from tpujob.store.db import READ
from tpujob.store.models import Attempt, Event, Job
from tpujob.store.states import ENDED, AttemptEnd, EndReason, State, is_legal


class Store:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.clock = clock
        self._local = threading.local()  # this thread's atomic block, if any
        self._reader = engine.execution_options(**{READ: True})

    # -- transactions -------------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Group the store calls of the block (in this thread) into one transaction: all of
        them commit at the end, or none if an exception leaves the block. A nested block joins
        the outer one. A lost compare-and-set (IllegalTransition, JobLocked) or an exception
        leaving a nested block rolls back the whole outer block, even when caught inside it:
        the block's premise is gone. On SQLite the block holds the write lock throughout."""
        block = getattr(self._local, "block", None)
        if block is not None:
            try:
                yield
            except BaseException as exc:
                block.doom(exc)
                raise
            return
        block = _Block(Session(self.engine, expire_on_commit=False))
        self._local.block = block
        try:
            yield
            if block.doomed is not None:
                raise block.doomed
            block.session.commit()
        except BaseException:
            block.session.rollback()
            raise
        finally:
            self._local.block = None
            block.session.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Session]:
        """The session of the current atomic block, or a session of its own committed at the end
        of the `with` (rolled back if an exception leaves it)."""
        block = getattr(self._local, "block", None)
        if block is not None:
            try:
                yield block.session
                block.session.flush()
            except SQLAlchemyError as exc:  # the transaction itself failed: nothing of it stands
                block.doom(exc)
                raise
            finally:
                # What a call returns is a snapshot, detached as outside a block; the next call
                # loads rows afresh instead of finding this one's objects in the identity map.
                block.session.expunge_all()
            return
        with Session(self.engine, expire_on_commit=False) as session:
            yield session
            session.commit()

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        """A session for reading only: the current atomic block's, or a deferred transaction of
        its own (db.READ) that reads a snapshot without SQLite's write lock, rolled back at the
        end of the `with`."""
        if getattr(self._local, "block", None) is not None:
            with self._tx() as session:
                yield session
            return
        with Session(self._reader, expire_on_commit=False) as session:
            yield session

    def _lost(self, error: Exception) -> Exception:
        """A lost compare-and-set: the error to raise, dooming the atomic block it happened in."""
        block = getattr(self._local, "block", None)
        if block is not None:
            block.doom(error)
        return error

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(self, *, name: str, spec_yaml: str, spec_json: str, accelerator: str, zone: str,
                project: str, cloud: str, keep_slice: bool = False) -> Job:
        now = self.clock()
        with self._tx() as session:
            job = Job(name=name, state=State.PENDING.value, spec_yaml=spec_yaml, spec_json=spec_json,
                      accelerator=accelerator, zone=zone, project=project, cloud=cloud,
                      keep_slice=keep_slice, created_at=now, updated_at=now, state_since=now)
            session.add(job)
            session.flush()
            session.add(Event(job_id=job.id, at=now, kind="created", to_state=State.PENDING.value,
                              message=f"job {name!r} recorded ({accelerator} in {zone}, cloud {cloud})"))
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
            return _fresh(session, job_id)

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

    # -- lease --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(self, job_id: int, owner: str, ttl_seconds: float, *,
              keep_alive: bool = False) -> Iterator[Job]:
        """Hold the job's lease for the block: taken on entry (JobLocked when another live owner
        holds it), released on the way out, exception or not. Yields the job as leased. Take
        it outside atomic blocks: inside one, other actors see the lease only once it commits.

        With `keep_alive`, a thread renews it every quarter of `ttl_seconds` for as long as the
        block runs, however long that is (a setup of many minutes): a process that dies in the
        block frees the job within `ttl_seconds`, not after its longest step's timeout. The
        thread stops renewing once another actor holds the lease (the block's next
        compare-and-set, made with `owner=`, then fails)."""
        job = self.acquire_lease(job_id, owner, ttl_seconds)
        done = threading.Event()
        keeper = None
        if keep_alive:
            keeper = threading.Thread(target=self._keep_lease, args=(job_id, owner, ttl_seconds, done),
                                      name=f"tpujob-lease-{job_id}", daemon=True)
            keeper.start()
        try:
            yield job
        finally:
            done.set()
            if keeper is not None:
                keeper.join()
            self.release_lease(job_id, owner)

    def _keep_lease(self, job_id: int, owner: str, ttl_seconds: float, done: threading.Event) -> None:
        while not done.wait(ttl_seconds / 4):
            try:
                self.acquire_lease(job_id, owner, ttl_seconds)
            except JobLocked:
                return   # lost: another actor has the job now; the block finds out on its next write
            except Exception:  # noqa: BLE001 - a busy or unreachable store: the next tick tries again
                continue

    def acquire_lease(self, job_id: int, owner: str, ttl_seconds: float) -> Job:
        """Take (or renew) the job's lease; JobLocked when another live actor holds it."""
        now = self.clock()
        free = or_(col(Job.lease_owner).is_(None), col(Job.lease_expires) <= now, col(Job.lease_owner) == owner)
        with self._tx() as session:
            result = session.exec(update(Job).where(and_(col(Job.id) == job_id, free))
                                  .values(lease_owner=owner, lease_expires=now + ttl_seconds))
            holder = session.get(Job, job_id, populate_existing=True)
            if result.rowcount == 1:
                return _fresh(session, job_id, holder)
        if holder is None:
            raise NotFoundError(f"no job {format_job_id(job_id)}")
        left = max(0.0, (holder.lease_expires or now) - now)
        raise JobLocked(f"job {format_job_id(job_id)} is locked by {holder.lease_owner} "
                        f"for {left:.0f} s more")

    def release_lease(self, job_id: int, owner: str) -> None:
        with self._tx() as session:
            session.exec(update(Job).where(and_(col(Job.id) == job_id, col(Job.lease_owner) == owner))
                         .values(lease_owner=None, lease_expires=None))

    # -- attempts and events ------------------------------------------------------------------
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
            name = reuse_slice or slice_name(job_id, number)
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
            return _fresh(session, job_id), attempt

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

    def record_steps(self, job_id: int, number: int, *, last_step: int | None = None,
                     resumed_from_step: int | None = None, total_steps: int | None = None,
                     at: float | None = None) -> None:
        """What the runtime reported for an attempt: its latest step (a sample of the progress
        series when `at` is given), the step it resumed from, the total it runs to."""
        values: dict[str, Any] = {k: v for k, v in (("last_step", last_step), ("resumed_from_step", resumed_from_step),
                                    ("total_steps", total_steps)) if v is not None}
        if not values:
            return
        where = and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number)
        with self._tx() as session:
            if last_step is not None and at is not None:
                (raw,) = session.exec(select(Attempt.progress).where(where)).all() or [None]
                values["progress"] = progress.add_sample(raw, at, last_step)
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

    def events(self, job_id: int) -> list[Event]:
        with self._read() as session:
            return list(session.exec(select(Event).where(col(Event.job_id) == job_id).order_by(col(Event.id))))


def _fresh(session: Session, job_id: int, job: Job | None = None) -> Job:
    """The job as the transaction now has it (`job`: already loaded); it exists, being just written."""
    job = job if job is not None else session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise NotFoundError(f"no job {format_job_id(job_id)}")
    return job


class _Block:
    """One atomic block: its session, and the error that dooms it to roll back, if any."""

    def __init__(self, session: Session):
        self.session = session
        self.doomed: BaseException | None = None

    def doom(self, error: BaseException) -> None:
        self.doomed = self.doomed or error


def open_store(url: str, clock: Callable[[], float] = time.time) -> Store:
    from tpujob.store.db import engine_for

    return Store(engine_for(url), clock=clock)
