"""The store's operations: one class, `Store`, the one door to the store's rows. Every state
change is a compare-and-set with its event row in the same transaction; the per-job lease makes
one actor (sweep, watch, user command) act at a time.

Each method commits alone, unless called inside `with store.atomic():`, whose calls (in that
thread) share one transaction. Every timestamp comes from the store's clock (`Store(engine,
clock=...)`), so tests pin time instead of sleeping.

Why one class: jobs, leases, attempts, the setup cache's digests, the lab's nodes and quotas
are all rows moved in the same transactions (`admit` re-reads the quotas in the transaction
that moves the job; `start_attempt` moves the job with its attempt), so they are one idea, the
store's operations, and read as one class, long as it is. The transactions under them
(transactions.py: atomic blocks, a session per call) are an idea of their own, with data of
their own (this thread's block), held by the Store rather than inherited."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator

from sqlalchemy import and_, delete, func, or_, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from tpujob import progress
from tpujob.errors import IllegalTransition, JobLocked, NotFoundError
from tpujob.names import format_job_id, node_names, nodes_text, slice_name
from tpujob.store import outbox
from tpujob.store.db import redacted
from tpujob.store.models import Attempt, Budget, Event, Job, LabNode, Quota, SetupCache, ShareWeight
from tpujob.store.states import ACTIVE, ENDED, AttemptEnd, EndReason, State, is_legal
from tpujob.store.transactions import Transactions, fresh_job

# The states in which a job holds its chips: admitted, and not ended.
HOLDING: frozenset[State] = frozenset(ACTIVE - {State.QUEUED})


class Store:
    """The job store: jobs and their compare-and-set moves and events, leases, attempts, the
    setup cache's digests, the lab's nodes and its quotas, over its transactions."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.clock = clock
        self._sessions = Transactions(engine)

    @cached_property
    def store_tag(self) -> str:
        """This store's tag in every cloud resource name (tpujob/names.py, store_tag): its id's
        first hex digits, read once (the id never changes)."""
        from tpujob.names import store_tag
        from tpujob.store.identity import store_id

        return store_tag(store_id(self.engine))

    def error_line(self, exc: Exception) -> str:
        """`Type: first line` of an error the store raised, for a report or a log: the driver's
        message may quote the store's URL and its password, which this hides."""
        text = str(exc).strip()
        url = self.engine.url.render_as_string(hide_password=False)
        return f"{type(exc).__name__}: {redacted(url, text.splitlines()[0] if text else '')}"

    def atomic(self) -> contextlib.AbstractContextManager[None]:
        """Group the store calls of the block (in this thread) into one transaction
        (Transactions.atomic)."""
        return self._sessions.atomic()

    # --- jobs: added, read, moved (compare-and-set, an event in the same transaction), admitted, removed.

    def add_job(self, *, name: str, spec_yaml: str, spec_json: str, accelerator: str, zone: str,
                project: str, cloud: str, keep_slice: bool = False, owner: str | None = None,
                from_node: str | None = None, priority: str = "normal", queued: bool = False) -> Job:
        """A new job: PENDING, or QUEUED (`queued`) when a lab's quota covers it."""
        now = self.clock()
        state = State.QUEUED if queued else State.PENDING
        with self._sessions.write() as session:
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
        with self._sessions.read() as session:
            job = session.get(Job, job_id, populate_existing=True)
            if job is None:
                raise NotFoundError(f"no job {format_job_id(job_id)}")
            return job

    def find(self, ref: str) -> Job:
        """A job by id (`42`, `000042`) or by name (the newest job of that name)."""
        ref = str(ref).strip()
        if ref.isdigit():
            return self.get(int(ref))
        with self._sessions.read() as session:
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
        with self._sessions.read() as session:
            return list(session.exec(query))

    def jobs_ended_since(self, since: float) -> list[Job]:
        """Jobs that reached an ended state at `since` or later."""
        query = (select(Job).where(col(Job.state).in_([s.value for s in ENDED]), col(Job.ended_at) >= since)
                 .order_by(col(Job.id)))
        with self._sessions.read() as session:
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
        with self._sessions.write() as session:
            result = session.exec(update(Job).where(and_(*where)).values(**values))
            if result.rowcount != 1:
                current = session.get(Job, job_id, populate_existing=True)
                if current is None:
                    raise NotFoundError(f"no job {format_job_id(job_id)}")
                if owner is not None and current.state == src.value:
                    raise self._sessions.lost(JobLocked(f"job {format_job_id(job_id)} is no longer leased to {owner}"))
                raise self._sessions.lost(IllegalTransition(
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
        with self._sessions.read() as session:
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
                with self._sessions.write() as session:
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
        with self._sessions.write() as session:
            session.exec(update(Job).where(col(Job.id) == job_id).values(**fields))

    def mark_observed(self, job_ids: list[int], at: float) -> None:
        """One statement for a whole sweep: when its slices were last looked at."""
        if not job_ids:
            return
        with self._sessions.write() as session:
            session.exec(update(Job).where(col(Job.id).in_(job_ids)).values(observed_at=at))

    def add_event(self, job_id: int, kind: str, message: str) -> None:
        with self._sessions.write() as session:
            session.add(Event(job_id=job_id, at=self.clock(), kind=kind, message=message))

    def remove(self, job_id: int) -> None:
        """Forget a job entirely (`clean`): its events and attempts go with it."""
        with self._sessions.write() as session:
            outbox.remove_for(session, job_id)
            session.exec(delete(Event).where(col(Event.job_id) == job_id))
            session.exec(delete(Attempt).where(col(Attempt.job_id) == job_id))
            session.exec(delete(Job).where(col(Job.id) == job_id))

    def events(self, job_id: int) -> list[Event]:
        with self._sessions.read() as session:
            return list(session.exec(select(Event).where(col(Event.job_id) == job_id).order_by(col(Event.id))))

    # --- leases: one actor (sweep, watch, user command) acts on a job at a time. A lease is taken and
    # renewed by compare-and-set on the job's row and expires on its own, so a dead actor frees the
    # job within the lease's time to live.

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
        with self._sessions.write() as session:
            result = session.exec(update(Job).where(and_(col(Job.id) == job_id, free))
                                  .values(lease_owner=owner, lease_expires=now + ttl_seconds))
            holder = session.get(Job, job_id, populate_existing=True)
            if result.rowcount == 1:
                return fresh_job(session, job_id, holder)
        if holder is None:
            raise NotFoundError(f"no job {format_job_id(job_id)}")
        left = max(0.0, (holder.lease_expires or now) - now)
        raise JobLocked(f"job {format_job_id(job_id)} is locked by {holder.lease_owner} "
                        f"for {left:.0f} s more")

    def release_lease(self, job_id: int, owner: str) -> None:
        with self._sessions.write() as session:
            session.exec(update(Job).where(and_(col(Job.id) == job_id, col(Job.lease_owner) == owner))
                         .values(lease_owner=None, lease_expires=None))

    # --- attempts: opened together with the job's move (one transaction), ended, and what is recorded
    # on them as they run (cause, growth, create operation, host keys, steps).

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
        with self._sessions.write() as session:
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
                raise self._sessions.lost(IllegalTransition(f"job {format_job_id(job_id)} changed concurrently: "
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
        with self._sessions.write() as session:
            session.exec(update(Attempt)
                         .where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number,
                                     col(Attempt.ended_at).is_(None)))
                         .values(**values))

    def record_cause(self, job_id: int, number: int, cause: str) -> None:
        """Why attempt `number` ended, in words (the move that ended it), for `show`."""
        with self._sessions.write() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(cause=cause))

    def record_growing(self, job_id: int, number: int, growing: str | None) -> None:
        """The nodes being created to grow attempt `number` back (JSON; None: none)."""
        with self._sessions.write() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(growing=growing))

    def record_create_operation(self, job_id: int, number: int, operation: str | None) -> None:
        """The operation of attempt `number`'s node create (None: forget it, to create again)."""
        with self._sessions.write() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(create_operation=operation))

    def record_host_keys(self, job_id: int, number: int, host_keys: str) -> None:
        with self._sessions.write() as session:
            session.exec(update(Attempt).where(and_(col(Attempt.job_id) == job_id, col(Attempt.number) == number))
                         .values(host_keys=host_keys))

    def record_host_user(self, job_id: int, number: int, user: str) -> None:
        """Who the attempt's program runs as on its hosts, once: the first setup's login."""
        with self._sessions.write() as session:
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
        with self._sessions.write() as session:
            if last_step is not None and at is not None:
                (raw,) = session.exec(select(Attempt.progress).where(where)).all() or [None]
                values["progress"] = progress.add_sample(raw, at, last_step)
            if reported:  # over what was handed at launch (mtbi_ms): the program's word is newer
                (had,) = session.exec(select(Attempt.reported).where(where)).all() or [None]
                values["reported"] = json.dumps({**_json_object(had), **reported}, sort_keys=True)
            session.exec(update(Attempt).where(where).values(**values))

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._sessions.read() as session:
            return list(session.exec(select(Attempt).where(col(Attempt.job_id) == job_id)
                                     .order_by(col(Attempt.number))))

    def attempts_of(self, job_ids: Iterable[int]) -> dict[int, list[Attempt]]:
        """Every attempt of these jobs in one query: {job id: its attempts in order}."""
        ids = list(job_ids)
        found: dict[int, list[Attempt]] = {job_id: [] for job_id in ids}
        if ids:
            with self._sessions.read() as session:
                for row in session.exec(select(Attempt).where(col(Attempt.job_id).in_(ids))
                                        .order_by(col(Attempt.job_id), col(Attempt.number))):
                    found[row.job_id].append(row)
        return found

    def current_attempt(self, job_id: int) -> Attempt | None:
        with self._sessions.read() as session:
            found: Attempt | None = session.exec(select(Attempt).where(col(Attempt.job_id) == job_id)
                                                 .order_by(col(Attempt.number).desc())).first()
            return found

    # --- the setup cache's digests (migration 16): the sha256 of each archive, by run dir bucket and
    # cache key, recorded from host 0's report when it stored it, read before a later setup so that
    # its hosts unpack only that archive (attempt.setup_cache, templates/setup.sh).

    def setup_cache_digest(self, bucket: str, cache_key: str) -> str | None:
        """The sha256 recorded for the archive of `cache_key` in `bucket`; None: none is."""
        with self._sessions.read() as session:
            row = session.get(SetupCache, (bucket, cache_key))
            return row.sha256 if row is not None else None

    def record_setup_cache_digest(self, bucket: str, cache_key: str, sha256: str) -> None:
        """Record (or replace: host 0 stored a new one in place of a refused archive) it."""
        with self._sessions.write() as session:
            session.merge(SetupCache(bucket=bucket, cache_key=cache_key, sha256=sha256, recorded_at=self.clock()))

    def forget_setup_cache_digest(self, bucket: str, cache_key: str) -> None:
        """The archive was deleted (`tpujob cache clear`): its digest goes with it."""
        with self._sessions.write() as session:
            session.exec(delete(SetupCache).where(and_(
                col(SetupCache.bucket) == bucket, col(SetupCache.cache_key) == cache_key)))

    # --- the lab's nodes (migration 18): every $TPUJOB_HOME sharing this store, by its SSH public key.
    # A node registers (or refreshes) its own key on every sweep and create; slices are created with
    # every registered key, so any node of the lab can log in on any job's hosts, including a node
    # that joins while jobs run (it adds its key to their live slices itself: attempt/hosts.py).
    # Only public keys are here: each private key stays in its node's home.

    def register_node(self, public_key: str, name: str, account: str | None = None) -> None:
        """This node's key, seen now: added once, its name, account and last_seen kept current."""
        now = self.clock()
        values = dict(name=name, last_seen=now, **({"account": account} if account else {}))
        for _ in range(2):  # two nodes' first sweeps at once: the loser of the insert updates
            with self._sessions.write() as session:
                done = session.exec(update(LabNode).where(col(LabNode.public_key) == public_key).values(**values))
                if done.rowcount == 1:
                    return
            try:
                with self._sessions.write() as session:
                    session.add(LabNode(public_key=public_key, registered_at=now, **values))
                return
            except IntegrityError:
                continue

    def lab_nodes(self) -> list[LabNode]:
        """Every registered node, the first registered first."""
        with self._sessions.read() as session:
            return list(session.exec(select(LabNode).order_by(col(LabNode.registered_at), col(LabNode.public_key))))

    # --- the lab's scheduler: its caps (`quota`), the users' fair-share weights and budgets, and what
    # a sweep reads to decide admissions (reconcile/admission.py; the move itself is `admit`).

    def set_quota(self, family: str, chips: int, *, region: str = "", provisioning: str = "") -> Quota:
        """Declare (or change) a cap; "" stands for any region or provisioning."""
        now = self.clock()
        with self._sessions.write() as session:
            row = session.get(Quota, (family, region, provisioning))
            if row is None:
                row = Quota(family=family, region=region, provisioning=provisioning, chips=chips, set_at=now)
                session.add(row)
            else:
                row.chips, row.set_at = chips, now
            session.flush()
            return Quota(family=family, region=region, provisioning=provisioning, chips=chips, set_at=now)

    def remove_quota(self, family: str, *, region: str = "", provisioning: str = "") -> bool:
        with self._sessions.write() as session:
            row = session.get(Quota, (family, region, provisioning))
            if row is None:
                return False
            session.delete(row)
            return True

    def quotas(self) -> list[Quota]:
        with self._sessions.read() as session:
            return list(session.exec(select(Quota).order_by(col(Quota.family), col(Quota.region),
                                                            col(Quota.provisioning))))

    def set_weight(self, owner: str, weight: float) -> None:
        with self._sessions.write() as session:
            row = session.get(ShareWeight, owner)
            if row is None:
                session.add(ShareWeight(owner=owner, weight=weight))
            else:
                row.weight = weight

    def set_budget(self, owner: str, dollars: float, period: str) -> None:
        with self._sessions.write() as session:
            row = session.get(Budget, owner)
            if row is None:
                session.add(Budget(owner=owner, dollars=dollars, period=period))
            else:
                row.dollars, row.period = dollars, period

    def budgets(self) -> list[Budget]:
        with self._sessions.read() as session:
            return list(session.exec(select(Budget).order_by(col(Budget.owner))))

    def spend_rows(self, job_ids: list[int] | None = None, owners_since: float | None = None
                   ) -> list[tuple[int, str | None, str, float, float | None]]:
        """(job id, owner, the job's spec_json, started_at, ended_at) of the attempts of these
        jobs, and of every attempt running at or after `owners_since`: what spending is summed
        from (reconcile/spending.py)."""
        where: list[Any] = []
        if job_ids:
            where.append(col(Attempt.job_id).in_(job_ids))
        if owners_since is not None:
            where.append(col(Attempt.ended_at).is_(None) | (col(Attempt.ended_at) >= owners_since))
        if not where:
            return []
        query = (sa_select(col(Job.id), col(Job.owner), col(Job.spec_json), col(Attempt.started_at),
                           col(Attempt.ended_at))
                 .join(Job, col(Job.id) == col(Attempt.job_id)).where(or_(*where)))
        with self._sessions.read() as session:
            return [(job_id, owner, spec, started, ended)
                    for job_id, owner, spec, started, ended in session.execute(query)]

    def weights(self) -> dict[str, float]:
        with self._sessions.read() as session:
            return {row.owner: row.weight for row in session.exec(select(ShareWeight))}

    def usage_rows(self, since: float) -> list[tuple[str | None, str, int, float, float | None]]:
        """(owner, accelerator, slices, started_at, ended_at) of every attempt running at or after
        `since`: what fair share's decayed chip-hours are summed from."""
        query = (sa_select(col(Job.owner), col(Attempt.accelerator), col(Attempt.slices), col(Attempt.started_at),
                           col(Attempt.ended_at))
                 .join(Job, col(Job.id) == col(Attempt.job_id))
                 .where((col(Attempt.ended_at).is_(None)) | (col(Attempt.ended_at) >= since)))
        with self._sessions.read() as session:
            return [(owner, accel, slices, started, ended)
                    for owner, accel, slices, started, ended in session.execute(query)]

    def set_waiting(self, job_id: int, reason: str) -> None:
        """Why a QUEUED job waits (`list`, `show`); written only when it changed."""
        with self._sessions.write() as session:
            session.exec(update(Job).where(and_(col(Job.id) == job_id, col(Job.state) == State.QUEUED.value,
                                                col(Job.waiting_for).is_distinct_from(reason)))
                         .values(waiting_for=reason))


def open_store(url: str, clock: Callable[[], float] | None = None) -> Store:
    """The store at `url`, its timestamps on `clock`: by default the store server's
    (store/clock.py), which every node of a lab shares whatever its own clock says."""
    from tpujob.store.clock import StoreClock
    from tpujob.store.db import engine_for

    engine = engine_for(url)
    return Store(engine, clock=clock or StoreClock(engine))


def _json_object(raw: str | None) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
