"""Plain reads for commands that only look (`list`) and for the schema check on every open."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy.engine import Engine
from sqlalchemy.sql import Select
from typing_extensions import Unpack

Rows = list[tuple[Any, ...]]


def fetch_all(engine: Engine, query: Select[Unpack[tuple[Any, ...]]]) -> Rows:
    """Run a Core SELECT on the engine's DBAPI connection; its rows as plain tuples.

    The cost avoided: reading an attribute of a SQLAlchemy Row costs about 1 us, as much as the
    rest of `list`'s work per job (and the DBAPI's own transaction never takes SQLite's write
    lock, as the store's reads do not either: db.py's `begin` hook). The
    query's values are rendered inline (literal_binds), so the SQL runs under any DBAPI's
    paramstyle: only the store's own constants go into these queries, never user input.
    """
    sql = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    conn = engine.raw_connection()
    try:
        cursor = conn.cursor()
        try:
            cursor.execute(sql)
            return cast(Rows, cursor.fetchall())
        finally:
            cursor.close()
    finally:
        conn.close()  # back to the pool, which rolls back whatever the DBAPI opened
