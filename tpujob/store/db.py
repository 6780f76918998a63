"""The engine: SQLite (WAL, immediate write transactions) by default, any SQLAlchemy URL too.

A SQLite store's own failures leave as one line that says how to recover (`StoreError`): a
damaged file, a read-only one; before a migration, the file is copied next to itself.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

from tpujob.errors import ConfigError, StoreError, TpujobError
from tpujob.settings import private_file, redact_url
from tpujob.store.migrations import MIGRATION_TABLE, migrate

READ = "tpujob_read"  # the execution option of a read-only transaction (see _on_begin)

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()  # one engine per URL and process, even when threads open it at once


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store's URL (`sqlite:///PATH`, or `sqlite:///file:PATH?...&uri=true`);
    None for an in-memory one or another database."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.split("sqlite:///", 1)[1]
    if path.startswith("file:") and "uri=true" in path:
        path = path[len("file:"):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def _sqlite_engine(url: str) -> Engine:
    path = url.split("sqlite:///", 1)[1] if url.startswith("sqlite:///") else ""
    file = sqlite_file(url)
    if file is not None:
        private_file(file)  # made 0600 before SQLite opens it (its -wal, -shm follow)
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
        # A read (Transactions.read, through the READ engine option) begins deferred: under WAL it
        # reads a snapshot and neither waits for a writer nor makes one wait, so `show` or the
        # dashboard does not queue behind a sweep's workers, nor they behind it.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ) else "BEGIN IMMEDIATE")

    if file is not None:
        @event.listens_for(engine, "handle_error")
        def _on_error(context: Any) -> None:
            # Raised in place of the driver's error, wherever a statement met it (a damaged page
            # may be read by any command, a read-only file refuses the first write): one line
            # that says what to do, not "unexpected DatabaseError" and the statement.
            failure = _sqlite_failure(file, context.original_exception)
            if failure is not None:
                raise failure

    return engine


def _sqlite_failure(file: Path, exc: BaseException) -> StoreError | None:
    """A damaged or read-only store file (by SQLite's result code) as the one line to print."""
    code = getattr(exc, "sqlite_errorname", "")  # sqlite3's errors carry it since Python 3.11
    cause = (str(exc).strip().splitlines() or [code])[0]
    path = shlex.quote(str(file))
    if code.startswith("SQLITE_READONLY"):
        where = shlex.quote(str(file.parent))
        return StoreError(f"the store {file} is read-only ({cause}): tpujob writes it and its directory on every "
                          f"change; check their owner and mode with `ls -ld {where} {path}`")
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        aside = shlex.quote(f"{file}.damaged")
        kept = backups_of(file)
        then = (f"copy back its newest backup, `cp {shlex.quote(str(kept[-1]))} {path}`" if kept else
                f"the next command starts an empty store (`sqlite3 {aside} .recover` may save its rows)")
        return StoreError(f"the store {file} is damaged ({cause}): move it aside, `mv {path} {aside}` (its -wal and "
                          f"-shm files too, if any), then {then}")
    return None


def backups_of(file: Path) -> list[Path]:
    """The store's backups (`backup`), oldest version first."""
    def version(path: Path) -> int:
        number = path.name[len(file.name) + 2:-len(".bak")]
        return int(number) if number.isdigit() else -1

    return sorted((p for p in file.parent.glob(f"{file.name}.v*.bak") if version(p) >= 0), key=version)


def backup(engine: Engine, file: Path, version: int) -> Path:
    """Copy the store, at schema `version`, to FILE.vVERSION.bak next to it (mode 0600), before
    a migration changes it. sqlite3's online backup API copies a consistent snapshot even while
    other processes write; the copy is made under another name and renamed, so a backup that
    exists is whole."""
    target = file.with_name(f"{file.name}.v{version}.bak")
    partial = file.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        os.close(os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW, 0o600))  # born private
        raw = engine.raw_connection()
        try:
            copy = sqlite3.connect(partial)
            try:
                raw.driver_connection.backup(copy)  # type: ignore[union-attr]  # pysqlite's own connection
                # A rollback journal, not the store's WAL: reading the copy leaves no -wal and
                # -shm files beside it (made with the reader's umask).
                copy.execute("PRAGMA journal_mode=DELETE")
            finally:
                copy.close()
        finally:
            raw.close()
        os.chmod(partial, 0o600)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        partial.unlink(missing_ok=True)
        raise StoreError(f"cannot back the store {file} up before migrating it ({exc}); nothing was changed") \
            from None
    return target


def check_writable(engine: Engine, url: str) -> None:
    """Raise a ConfigError (a SQLite file's StoreError) unless a write to the store succeeds: a
    statement that writes a row onto itself, rolled back (nothing changes)."""
    from sqlalchemy.exc import DBAPIError

    try:
        with engine.connect() as conn:
            transaction = conn.begin()
            try:
                conn.exec_driver_sql(f"UPDATE {MIGRATION_TABLE} SET name = name")
            finally:
                transaction.rollback()
    except DBAPIError as exc:  # a server's refusal (a read-only transaction, no UPDATE privilege)
        raise _store_error(url, "cannot write to store", exc) from None


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


def _cause(url: str, exc: Exception) -> str:
    """The driver's first line of cause, the store's URL and password hidden."""
    cause = str(getattr(exc, "orig", None) or exc).strip()
    return redacted(url, cause.splitlines()[0][:300] if cause else type(exc).__name__)


def _store_error(url: str, what: str, exc: Exception) -> ConfigError:
    """One line naming the store (password hidden) and the driver's first line of cause."""
    return ConfigError(f"{what} {redact_url(url)!r}: {_cause(url, exc)}")


def _disk_full(exc: Exception) -> bool:
    """SQLite's SQLITE_FULL ("database or disk is full", sqlite.org/rescode.html#full), or
    PostgreSQL's disk_full (SQLSTATE 53100, its errcodes appendix)."""
    orig = getattr(exc, "orig", None)
    return (getattr(orig, "sqlite_errorcode", None) == 13 or getattr(orig, "pgcode", None) == "53100"
            or getattr(orig, "sqlstate", None) == "53100")


# How long opening a SQLite store tries again while another process holds it at its first
# moments (a new file turned to WAL, its tables made): the busy timeout's 30 s, once more.
OPEN_PATIENCE_SECONDS = 30.0


def _migrate_sqlite_busy_again(engine: Engine, backup: Any) -> None:
    """migrate(), again while SQLite answers SQLITE_BUSY ("database is locked"). The busy
    timeout covers a lock held by another connection, but not every case: a connection that
    would deadlock (two processes turning a new file to WAL, or upgrading a read to a write)
    gets SQLITE_BUSY at once, and "the only way to resolve it is for one connection to abandon
    its transaction" (sqlite.org/rescode.html#busy, lang_transaction.html). Seen with three
    processes opening a blank store at once on a loaded machine: one got "database is locked"."""
    from sqlalchemy.exc import OperationalError

    deadline = time.monotonic() + OPEN_PATIENCE_SECONDS
    while True:
        try:
            migrate(engine, backup=backup)
            return
        except OperationalError as exc:
            busy = engine.dialect.name == "sqlite" and "database is locked" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
            engine.dispose()  # the connections that lost: begin again on new ones
            time.sleep(0.05)


def _open(url: str) -> Engine:
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        engine = _sqlite_engine(url) if url.startswith("sqlite") else _server_engine(url)
    except Exception as exc:  # bad URL or missing driver: a configuration problem
        raise _store_error(url, "cannot open store", exc) from None
    file = sqlite_file(url)
    kept: list[Path] = []

    def keep(version: int) -> None:
        assert file is not None
        kept.append(backup(engine, file, version))

    try:
        # The first connection: a server that is down or refuses us shows here.
        _migrate_sqlite_busy_again(engine, keep if file is not None else None)
    except TpujobError:
        engine.dispose()
        raise
    except Exception as exc:
        engine.dispose()
        if kept:
            raise StoreError(f"migrating the store {redact_url(url)!r} failed ({_cause(url, exc)}); "
                             f"its copy from before the migration is {kept[-1]}") from exc
        if isinstance(exc, (OperationalError, InterfaceError)):
            if _disk_full(exc):  # the store was reached: its disk has no room for what it writes
                raise _store_error(url, "disk full: cannot write the store", exc) from None
            raise _store_error(url, "cannot reach store", exc) from None
        raise
    _engines[url] = engine
    return engine
