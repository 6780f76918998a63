"""Migrations from a blank database: tables, bookkeeping, idempotent re-open, one transaction
per migration, and the SQLModel models kept equal to the migrated schema."""

from __future__ import annotations

import multiprocessing

import pytest
from sqlalchemy import Boolean, Float, Integer, String, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import TypeDecorator

from tpujob.store import db, migrations
from tpujob.store.migrations import MIGRATION_TABLE, MIGRATIONS, applied_versions, migrate
from tpujob.store.models import Attempt, Event, Job, LabNode, Outbox, SetupCache

LATEST = MIGRATIONS[-1][0]


def _versions_from(first: int) -> list[int]:
    return [v for v, _, _ in MIGRATIONS if v >= first]


def _url(tmp_path, name="blank.db") -> str:
    return f"sqlite:///{tmp_path / name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """A blank store's URL: a SQLite file, and a fresh database on a real PostgreSQL server."""
    return _url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def _tables(engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def _migration_rows(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT version, name FROM {MIGRATION_TABLE} ORDER BY version"))]


def test_versions_are_append_only_and_increasing():
    # Branches developed side by side reserve their numbers (docs: a gap is another branch's
    # version, filled when it is merged), so a number may be skipped, never reused or reordered.
    versions = [v for v, _, _ in MIGRATIONS]
    assert versions[0] == 1 and all(a < b for a, b in zip(versions, versions[1:]))
    assert all(name for _, name, _ in MIGRATIONS)


def test_migrate_from_blank(store_url):
    engine = create_engine(store_url)
    assert _tables(engine) == set()
    assert applied_versions(engine) == []
    assert migrate(engine) == [v for v, _, _ in MIGRATIONS]
    assert _tables(engine) == {"job", "attempt", "event", "outbox", "store_info", "setup_cache", "lab_node", "quota",
                               "share_weight", "budget", MIGRATION_TABLE}
    assert applied_versions(engine) == _versions_from(1)
    assert _migration_rows(engine) == [(v, n) for v, n, _ in MIGRATIONS]


def test_reopen_is_a_no_op(store_url):
    engine = create_engine(store_url)
    migrate(engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO job (name, state, spec_yaml, spec_json, accelerator, zone, project, "
                          "cloud, attempt, preemptions, failures, nan_restarts, keep_slice, created_at, "
                          "updated_at) VALUES ('kept', 'PENDING', '', '{}', 'v4-8', 'z', 'p', 'local', "
                          "0, 0, 0, 0, FALSE, 1, 1)"))
    rows = _migration_rows(engine)
    assert migrate(engine) == []
    assert migrate(create_engine(store_url)) == []
    assert _migration_rows(engine) == rows
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM job")).scalars().all() == ["kept"]


def _store_before(engine, version: int, job_values: str) -> None:
    """A store as the release before migration `version` left it, with one job in it."""
    for number, name, apply in [m for m in MIGRATIONS if m[0] < version]:
        with engine.begin() as conn:
            migrations._bookkeeping.create_all(conn)
            apply(conn)
            conn.execute(migrations._migration.insert().values(version=number, name=name, applied_at=0))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO job (name, state, spec_yaml, spec_json, accelerator, zone, project, "
                          "cloud, attempt, preemptions, failures, nan_restarts, keep_slice, created_at, "
                          f"updated_at) VALUES ({job_values})"))


@pytest.mark.parametrize("version", [v for v, _, _ in MIGRATIONS[1:]])  # from 1: a blank store
def test_a_store_of_every_earlier_version_migrates_with_its_jobs(store_url, version):
    engine = create_engine(store_url)
    _store_before(engine, version, "'old', 'RUNNING', 'name: old', '{}', 'v4-8', 'z', 'p', 'local', "
                                   "1, 1, 0, 0, FALSE, 1, 2")
    assert migrate(engine) == _versions_from(version)
    assert _migration_rows(engine) == [(v, n) for v, n, _ in MIGRATIONS]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, state, preemptions, keep_slice, created_at FROM job")).all() == [
            ("old", "RUNNING", 1, False, 1.0)]


def test_capacity_misses_arrive_with_a_zero_for_jobs_already_stored(store_url):
    engine = create_engine(store_url)
    _store_before(engine, 5, "'old', 'RECOVERING', '', '{}', 'v4-8', 'z', 'p', 'local', 2, 0, 0, 0, FALSE, 1, 1")
    assert migrate(engine) == _versions_from(5)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, capacity_misses FROM job")).all() == [("old", 0)]


def test_flaps_arrive_with_a_zero_for_jobs_already_stored(store_url):
    engine = create_engine(store_url)
    _store_before(engine, 6, "'old', 'RUNNING', '', '{}', 'v4-8', 'z', 'p', 'local', 3, 2, 0, 0, FALSE, 1, 1")
    assert migrate(engine) == _versions_from(6)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, preemptions, flaps FROM job")).all() == [("old", 2, 0)]


def test_the_outbox_arrives_empty_beside_jobs_already_stored(store_url):
    engine = create_engine(store_url)
    _store_before(engine, 7, "'old', 'RUNNING', '', '{}', 'v4-8', 'z', 'p', 'local', 1, 0, 0, 0, FALSE, 1, 1")
    assert "outbox" not in _tables(engine)
    assert migrate(engine) == _versions_from(7)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM job")).scalars().all() == ["old"]
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar() == 0


def test_migration_17_adds_owners_empty(tmp_path):
    """Owners (tests/test_owners.py): a job stored before them has no owner and no node."""
    engine = create_engine(_url(tmp_path, "old.db"))
    _store_before(engine, 17, "'old', 'RUNNING', '', '{}', 'v4-8', 'z', 'p', 'local', 1, 0, 0, 0, FALSE, 1, 1")
    assert 17 in migrate(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, owner, from_node FROM job")).all() == [("old", None, None)]


def test_engine_for_opens_a_migrated_wal_store(tmp_path):
    url = _url(tmp_path, "sub/dir/tpujob.db")
    engine = db.engine_for(url)
    assert db.engine_for(url) is engine
    assert (tmp_path / "sub/dir/tpujob.db").exists()
    assert applied_versions(engine) == _versions_from(1)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_a_failing_migration_leaves_nothing_behind(store_url, monkeypatch):
    # The store's own engine: it opens every transaction itself, so SQLite's DDL is transactional
    # (a bare pysqlite engine would autocommit each CREATE); PostgreSQL's DDL is transactional.
    engine = db.engine_for(store_url)

    def broken(conn):
        conn.execute(text("CREATE TABLE half_done (x INTEGER)"))
        conn.execute(text("ALTER TABLE job ADD COLUMN half_column INTEGER"))
        raise RuntimeError("crash in the middle of a migration")

    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS + [(LATEST + 1, "broken", broken)])
    with pytest.raises(RuntimeError):
        migrate(engine)
    assert "half_done" not in _tables(engine)
    assert "half_column" not in {c["name"] for c in inspect(engine).get_columns("job")}
    assert applied_versions(engine) == _versions_from(1)

    def fixed(conn):
        conn.execute(text("CREATE TABLE half_done (x INTEGER)"))

    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS + [(LATEST + 1, "fixed", fixed)])
    assert migrate(engine) == [LATEST + 1]
    assert "half_done" in _tables(engine)


def test_a_bad_store_url_is_a_config_error():
    from tpujob.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        db.engine_for("nosuchdialect://x/y")
    assert info.value.exit_code == 6


def _kind(sql_type) -> str:
    """The storage kind of a column type (VARCHAR, TEXT and SQLModel's AutoString are all text)."""
    if isinstance(sql_type, TypeDecorator):
        sql_type = sql_type.impl_instance
    for base, kind in ((Boolean, "bool"), (Integer, "int"), (Float, "float"), (String, "text")):
        if isinstance(sql_type, base):
            return kind
    raise AssertionError(f"unexpected column type {sql_type!r}")


@pytest.mark.parametrize("model", [Job, Attempt, Event, Outbox, SetupCache, LabNode], ids=lambda m: m.__tablename__)
def test_models_equal_the_migrated_tables(store_url, model):
    engine = create_engine(store_url)
    migrate(engine)
    insp = inspect(engine)
    table = model.__table__
    migrated = {c["name"]: c for c in insp.get_columns(table.name)}
    primary = set(insp.get_pk_constraint(table.name)["constrained_columns"])
    assert set(migrated) == set(table.columns.keys())
    for column in table.columns:
        found = migrated[column.name]
        assert found["nullable"] == column.nullable, column.name
        assert (column.name in primary) == column.primary_key, column.name
        assert _kind(found["type"]) == _kind(column.type), column.name
    indexed = {tuple(ix["column_names"]) for ix in insp.get_indexes(table.name)}
    assert indexed == {(c.name,) for c in table.columns if c.index}
    fks = {(fk["constrained_columns"][0], fk["referred_table"], fk["referred_columns"][0])
           for fk in insp.get_foreign_keys(table.name)}
    assert fks == {(fk.parent.name, fk.column.table.name, fk.column.name) for fk in table.foreign_keys}


def _open(url: str, barrier, results) -> None:
    barrier.wait()
    try:
        db.engine_for(url)
        results.put("ok")
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_blank_store_at_once(store_url):
    url = store_url
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3, timeout=60)
    results = ctx.Queue()
    procs = [ctx.Process(target=_open, args=(url, barrier, results)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=90) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert outcomes == ["ok"] * 3
    assert _migration_rows(create_engine(url)) == [(v, n) for v, n, _ in MIGRATIONS]


def test_a_foreign_key_is_enforced(store_url):
    engine = db.engine_for(store_url)
    with pytest.raises(IntegrityError, match="(?i)foreign key"):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO event (job_id, at, kind, message) VALUES (12345, 1, 'x', 'y')"))


def test_the_store_gets_one_random_id_once(tmp_path, store_url):
    """Migration 8: a label-safe id (lowercase hex, <= 63 characters), the same on every open,
    another for another store."""
    import re

    from tpujob.store.identity import store_id

    first = db.engine_for(store_url)
    other = db.engine_for(f"sqlite:///{tmp_path / 'other.db'}")
    ident = store_id(first)
    assert re.fullmatch(r"[a-z0-9_-]{1,63}", ident)
    assert store_id(first) == ident and store_id(other) != ident
    assert migrate(first) == []  # nothing applied twice
    with first.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM store_info").scalar() == 1
