"""The engine: SQLite (WAL, immediate write transactions) by default, any SQLAlchemy URL too."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

from tpujob.errors import ConfigError
from tpujob.settings import redact_url
from tpujob.store.migrations import migrate

READ = "tpujob_read"  # the execution option of a read-only transaction (see _on_begin)

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()  # one engine per URL and process, even when threads open it at once


def _sqlite_engine(url: str) -> Engine:
    path = url.split("sqlite:///", 1)[1] if url.startswith("sqlite:///") else ""
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # Sessions are short and per call; a sweep's act workers (TPUJOB_SWEEP_WORKERS) each hold at
    # most one connection at a time, so the pool grows with them instead of making them queue.
    pool = {} if not path or path == ":memory:" else dict(pool_size=8, max_overflow=64, pool_timeout=60)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **pool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" below issue BEGIN itself (the pysqlite recipe), so every
        # write transaction takes the write lock up front: two writers then queue on the
        # busy timeout instead of failing to upgrade a read lock ("database is locked").
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A read (Store._read, through the READ engine option) begins deferred: under WAL it
        # reads a snapshot and neither waits for a writer nor makes one wait, so `show` or the
        # dashboard does not queue behind a sweep's workers, nor they behind it.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ) else "BEGIN IMMEDIATE")

    return engine


def _password(url: str) -> str | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password
    except (ArgumentError, ValueError, TypeError):
        return None


def engine_for(url: str) -> Engine:
    """The migrated engine for `url`, created once per process."""
    with _engines_lock:
        return _engines.get(url) or _open(url)


def _server_engine(url: str) -> Engine:
    # A sweep's act workers (TPUJOB_SWEEP_WORKERS) each hold one connection at a time: the pool
    # grows with them. pre_ping: a lab's server restarts; a stale pooled connection is replaced.
    return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=64, pool_timeout=60)


def redacted(url: str, text: str) -> str:
    """`text` with the store's URL shown redacted and its password hidden: a driver's message
    may quote either."""
    text = text.replace(url, redact_url(url))
    password = _password(url)
    return text.replace(password, "***") if password else text


def _store_error(url: str, what: str, exc: Exception) -> ConfigError:
    """One line naming the store (password hidden) and the driver's first line of cause."""
    cause = str(getattr(exc, "orig", None) or exc).strip()
    detail = redacted(url, cause.splitlines()[0][:300] if cause else type(exc).__name__)
    return ConfigError(f"{what} {redact_url(url)!r}: {detail}")


def _disk_full(exc: Exception) -> bool:
    """SQLite's SQLITE_FULL ("database or disk is full", sqlite.org/rescode.html#full), or
    PostgreSQL's disk_full (SQLSTATE 53100, its errcodes appendix)."""
    orig = getattr(exc, "orig", None)
    return (getattr(orig, "sqlite_errorcode", None) == 13 or getattr(orig, "pgcode", None) == "53100"
            or getattr(orig, "sqlstate", None) == "53100")


def _open(url: str) -> Engine:
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        engine = _sqlite_engine(url) if url.startswith("sqlite") else _server_engine(url)
    except Exception as exc:  # bad URL or missing driver: a configuration problem
        raise _store_error(url, "cannot open store", exc) from None
    try:
        migrate(engine)  # the first connection: a server that is down or refuses us shows here
    except (OperationalError, InterfaceError) as exc:
        engine.dispose()
        if _disk_full(exc):  # the store was reached: its disk has no room for what it writes
            raise _store_error(url, "disk full: cannot write the store", exc) from None
        raise _store_error(url, "cannot reach store", exc) from None
    _engines[url] = engine
    return engine
