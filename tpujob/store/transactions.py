"""The store's transactions, under every Store operation: `atomic()` blocks, a session per call
(the block's, or one committed alone), read-only sessions, and the lost compare-and-set that
dooms a block. Store (repository.py) builds on Transactions; its lease and attempt operations
(leases.py, attempts.py) are mixins of it."""

from __future__ import annotations

import contextlib
import threading
import time
from functools import cached_property
from typing import Callable, Iterator

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from tpujob.errors import NotFoundError
from tpujob.names import format_job_id
from tpujob.store.db import READ, redacted
from tpujob.store.models import Job


class Transactions:
    """The engine, the clock and the sessions every store operation runs in."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.clock = clock
        self._local = threading.local()  # this thread's atomic block, if any
        self._reader = engine.execution_options(**{READ: True})

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
