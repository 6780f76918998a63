"""The per-job lease: one actor (sweep, watch, user command) acts on a job at a time. A lease
is taken and renewed by compare-and-set on the job's row and expires on its own, so a dead
actor frees the job within the lease's time to live."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from sqlalchemy import and_, or_, update
from sqlmodel import col

from tpujob.errors import JobLocked, NotFoundError
from tpujob.names import format_job_id
from tpujob.store.models import Job
from tpujob.store.transactions import Transactions, fresh_job


class Leases(Transactions):
    """The lease operations of Store."""

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
                return fresh_job(session, job_id, holder)
        if holder is None:
            raise NotFoundError(f"no job {format_job_id(job_id)}")
        left = max(0.0, (holder.lease_expires or now) - now)
        raise JobLocked(f"job {format_job_id(job_id)} is locked by {holder.lease_owner} "
                        f"for {left:.0f} s more")

    def release_lease(self, job_id: int, owner: str) -> None:
        with self._tx() as session:
            session.exec(update(Job).where(and_(col(Job.id) == job_id, col(Job.lease_owner) == owner))
                         .values(lease_owner=None, lease_expires=None))
