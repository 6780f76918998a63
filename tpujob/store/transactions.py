"""The store's transactions, under every Store operation: `atomic()` blocks, a session per call
(the block's, or one committed alone), read-only sessions, and the lost compare-and-set that
dooms a block. The Store (repository.py) holds one Transactions over its engine."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from tpujob.errors import NotFoundError
from tpujob.names import format_job_id
from tpujob.store.db import READ
from tpujob.store.models import Job


class Transactions:
    """The sessions every store operation runs in, and this thread's atomic block."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._local = threading.local()  # this thread's atomic block, if any
        self._reader = engine.execution_options(**{READ: True})

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
    def write(self) -> Iterator[Session]:
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
    def read(self) -> Iterator[Session]:
        """A session for reading only: the current atomic block's, or a deferred transaction of
        its own (db.READ) that reads a snapshot without SQLite's write lock, rolled back at the
        end of the `with`."""
        if getattr(self._local, "block", None) is not None:
            with self.write() as session:
                yield session
            return
        with Session(self._reader, expire_on_commit=False) as session:
            yield session

    def lost(self, error: Exception) -> Exception:
        """A lost compare-and-set: the error to raise, dooming the atomic block it happened in."""
        block = getattr(self._local, "block", None)
        if block is not None:
            block.doom(error)
        return error


def fresh_job(session: Session, job_id: int, job: Job | None = None) -> Job:
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
