"""Versioned schema migrations, run on open, each in its own transaction with its bookkeeping.

A migration is frozen once released: it defines the tables as they were at that version
(SQLAlchemy Core, portable to any SQLAlchemy URL), never by importing today's models.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Connection, Engine

from tpujob.store.reads import fetch_all

MIGRATION_TABLE = "tpujob_migration"


def _v1_initial(conn: Connection) -> None:
    md = MetaData()
    Table(
        "job", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String, nullable=False, index=True),
        Column("state", String, nullable=False, index=True),
        Column("end_reason", String),
        Column("spec_yaml", Text, nullable=False),
        Column("spec_json", Text, nullable=False),
        Column("accelerator", String, nullable=False),
        Column("zone", String, nullable=False),
        Column("project", String, nullable=False),
        Column("cloud", String, nullable=False),
        Column("attempt", Integer, nullable=False, default=0),
        Column("preemptions", Integer, nullable=False, default=0),
        Column("failures", Integer, nullable=False, default=0),
        Column("nan_restarts", Integer, nullable=False, default=0),
        Column("keep_slice", Boolean, nullable=False, default=False),
        Column("host0_ip", String),
        Column("created_at", Float, nullable=False),
        Column("updated_at", Float, nullable=False),
        Column("ended_at", Float),
        Column("observed_at", Float),
        Column("lease_owner", String),
        Column("lease_expires", Float),
    )
    Table(
        "attempt", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_id", Integer, ForeignKey("job.id"), nullable=False, index=True),
        Column("number", Integer, nullable=False),
        Column("slice_name", String, nullable=False),
        Column("zone", String, nullable=False),
        Column("accelerator", String, nullable=False),
        Column("queued", Boolean, nullable=False),
        Column("started_at", Float, nullable=False),
        Column("ended_at", Float),
        Column("end_reason", String),
        Column("last_step", Integer),
    )
    Table(
        "event", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_id", Integer, ForeignKey("job.id"), nullable=False, index=True),
        Column("at", Float, nullable=False),
        Column("kind", String, nullable=False),
        Column("message", Text, nullable=False),
        Column("from_state", String),
        Column("to_state", String),
    )
    md.create_all(conn)


def _v2_reconcile_columns(conn: Connection) -> None:
    # state_since: when the current state was entered (timeouts and backoff are measured from it);
    # unhealthy_since: first sweep that saw a READY slice with hosts unreachable (grace period);
    # placement: index into [primary, *tpu.fallback] of the current attempt's zone/accelerator.
    for ddl in ("ALTER TABLE job ADD COLUMN state_since FLOAT",
                "ALTER TABLE job ADD COLUMN unhealthy_since FLOAT",
                "ALTER TABLE job ADD COLUMN placement INTEGER NOT NULL DEFAULT 0"):
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("UPDATE job SET state_since = updated_at")


def _v3_accounting(conn: Connection) -> None:
    # running_seconds: time spent RUNNING, accumulated on every move out of RUNNING (goodput);
    # attempt.resumed_from_step: the checkpoint step the attempt's program restored (lost steps).
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN running_seconds FLOAT NOT NULL DEFAULT 0")
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN resumed_from_step INTEGER")


def _v4_host_keys(conn: Connection) -> None:
    # The slice's SSH host keys (JSON {index: [lines]}), read once from guest attributes: every
    # later sweep verifies hosts against them without another API call.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN host_keys TEXT")


def _v5_capacity_misses(conn: Connection) -> None:
    # Capacity misses (stockout, queue timeout, stuck provisioning) in a row: the backoff doubles
    # with each and the job fails no_capacity past requeue.max_capacity_retries; reset to 0 when a
    # slice comes up READY, and by `resume`.
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN capacity_misses INTEGER NOT NULL DEFAULT 0")


def _v6_flaps(conn: Connection) -> None:
    # Preemptions in a row of attempts that ran less than requeue.min_run_seconds: a preemption
    # restarts at once, but a slice that keeps going down within minutes waits backoff_seconds,
    # doubled per flap. Reset by a preemption after a longer run, and by `resume`.
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN flaps INTEGER NOT NULL DEFAULT 0")


def _v7_outbox(conn: Connection) -> None:
    # Notifications to send, one row per (job, state move, channel), written in the move's own
    # transaction (at least once); a sweep claims a row by compare-and-set before sending it
    # (never twice at once). `channel` indexes the spec's notify list: no address or URL here.
    md = MetaData()
    Table("job", md, Column("id", Integer, primary_key=True))  # for the foreign key; exists already
    outbox = Table(
        "outbox", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_id", Integer, ForeignKey("job.id"), nullable=False, index=True),
        Column("event_id", Integer, nullable=False),
        Column("channel", Integer, nullable=False),
        Column("kind", String, nullable=False),
        Column("text", Text, nullable=False),
        Column("status", String, nullable=False, index=True),
        Column("created_at", Float, nullable=False),
        Column("next_try", Float, nullable=False),
        Column("attempts", Integer, nullable=False, default=0),
        Column("last_error", Text),
        Column("claimed_by", String),
        Column("claim_expires", Float),
        Column("sent_at", Float),
    )
    md.create_all(conn, tables=[outbox])
def _v8_store_id(conn: Connection) -> None:
    # The store's own id, random, made once: every cloud resource tpujob creates carries it as
    # the label `tpujob-store`, so two stores in one project (two labs, a deleted and re-made
    # store) tell their resources apart, and `tpujob gc` knows which orphans are its own. 32
    # lowercase hex digits: a valid GCP label value (lowercase letters, digits, <= 63 chars).
    md = MetaData()
    info = Table("store_info", md, Column("id", String, primary_key=True))
    md.create_all(conn)
    conn.execute(info.insert().values(id=uuid.uuid4().hex))


def _v9_deaths(conn: Connection) -> None:
    # attempt.cause: why each attempt ended, in words (the program's last log lines and its exit
    # code's meaning, the cloud's refusal, the setup script's stderr), for `show` per attempt.
    # job.bad_hosts: attempts ended because a host of their slice was bad (a TPU held by another
    # process), a budget of its own (requeue.max_bad_hosts).
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN cause TEXT")
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN bad_hosts INTEGER NOT NULL DEFAULT 0")


def _v10_hangs(conn: Connection) -> None:
    # Attempts ended because the program hung (no heartbeat progress, or no log output for
    # run.hang_seconds, on hosts that are all alive): their own budget, requeue.max_hangs.
    # Version 9 belongs to another branch (the bad-host budget); the numbers are append-only.
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN hangs INTEGER NOT NULL DEFAULT 0")


def _v11_progress(conn: Connection) -> None:
    # How far the run has got (tpujob/progress.py): the heartbeat's total, and the (time, step)
    # samples of the last minutes the rate and the time left are computed from.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN total_steps INTEGER")
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN progress TEXT")


def _v12_create_operation(conn: Connection) -> None:
    # A node create is not waited for (the sweep's worker moves on): its operation's name is
    # kept so that a node that never shows up (a stockout leaves none) is told by its error.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN create_operation TEXT")


def _v13_slices(conn: Connection) -> None:
    # Multislice: how many slices (nodes NAME-0 .. NAME-(N-1)) the attempt runs on.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN slices INTEGER NOT NULL DEFAULT 1")


def _v14_lost_slices(conn: Connection) -> None:
    # Multislice: which slices an attempt ended on losing, for `show` and the timeline's rows.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN lost_slices TEXT")


def _v15_elastic_nodes(conn: Connection) -> None:
    # Elastic multislice: an attempt's own node list (slices kept across attempts) and the nodes
    # being created to grow it back.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN nodes TEXT")
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN growing TEXT")


def _v16_setup_cache_digests(conn: Connection) -> None:
    # The setup cache's archives are unpacked at / on later hosts: the sha256 host 0 reported
    # when it stored one, per run dir bucket and cache key, is what a later host checks it
    # against before trusting it (attempt.setup_cache).
    md = MetaData()
    Table(
        "setup_cache", md,
        Column("bucket", String, primary_key=True),
        Column("cache_key", String, primary_key=True),
        Column("sha256", String, nullable=False),
        Column("recorded_at", Float, nullable=False),
    )
    md.create_all(conn)


def _v17_owners(conn: Connection) -> None:
    # Who submitted each job (the `user` setting, else ADC's account, else $USER@host) and from
    # which node: a lab shares one store (tpujob/owners.py). NULL on the jobs made before: nobody's.
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN owner TEXT")
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN from_node TEXT")


def _v18_lab(conn: Connection) -> None:
    # A lab: several nodes (login machines, laptops: each its own $TPUJOB_HOME and SSH key) on one
    # store. Each node registers its PUBLIC key here on every sweep and create; a slice is created
    # with every registered key in its `ssh-keys`, so any node can manage any job (a private key
    # never reaches the store). attempt.host_user: the user the attempt's program runs as on its
    # hosts (its files are under that user's home): every node logs in as it (metadata keys), or
    # knows it cannot (OS Login gives each account its own user).
    md = MetaData()
    Table(
        "lab_node", md,
        Column("public_key", String, primary_key=True),  # "ssh-ed25519 AAAA... tpujob"
        Column("name", String, nullable=False),  # host:$TPUJOB_HOME, for people
        Column("account", String),  # its OS Login account, where known
        Column("registered_at", Float, nullable=False),
        Column("last_seen", Float, nullable=False),
    )
    md.create_all(conn)
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN host_user TEXT")


def _v19_scheduler(conn: Connection) -> None:
    # A lab's scheduler (docs/scheduler.md): the caps a lab declares (`tpujob quota set`; ""
    # stands for any region or provisioning), each user's fair-share weight, and on each job its
    # band (the spec's `priority`) and why it waits in QUEUED, in words, for `list` and `show`.
    md = MetaData()
    Table(
        "quota", md,
        Column("family", String, primary_key=True),
        Column("region", String, primary_key=True),
        Column("provisioning", String, primary_key=True),
        Column("chips", Integer, nullable=False),
        Column("set_at", Float, nullable=False),
    )
    Table(
        "budget", md,
        Column("owner", String, primary_key=True),
        Column("dollars", Float, nullable=False),
        Column("period", String, nullable=False),  # day | week | month (UTC)
    )
    Table(
        "share_weight", md,
        Column("owner", String, primary_key=True),
        Column("weight", Float, nullable=False),
    )
    md.create_all(conn)
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal'")
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN waiting_for TEXT")
    conn.exec_driver_sql("ALTER TABLE job ADD COLUMN evictions INTEGER NOT NULL DEFAULT 0")


def _v20_reported(conn: Connection) -> None:
    # attempt.reported: what the bundled runtime measured of the attempt (JSON of milliseconds:
    # compile, restore, checkpoint stalls, its step time, its last save), read from its heartbeat
    # by status.sh; the ledger's buckets only it knows (tpujob/service/ledger.py). NULL: nothing.
    conn.exec_driver_sql("ALTER TABLE attempt ADD COLUMN reported TEXT")


# (version, name, function). Append only.
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial: job, attempt, event", _v1_initial),
    (2, "job: state_since, unhealthy_since, placement", _v2_reconcile_columns),
    (3, "job.running_seconds, attempt.resumed_from_step", _v3_accounting),
    (4, "attempt.host_keys", _v4_host_keys),
    (5, "job.capacity_misses", _v5_capacity_misses),
    (6, "job.flaps", _v6_flaps),
    (7, "outbox", _v7_outbox),
    (8, "store_info: the store's id", _v8_store_id),
    (9, "attempt.cause, job.bad_hosts", _v9_deaths),
    (10, "job.hangs", _v10_hangs),
    (11, "attempt.total_steps, attempt.progress", _v11_progress),
    (12, "attempt.create_operation", _v12_create_operation),
    (13, "attempt.slices", _v13_slices),
    (14, "attempt.lost_slices", _v14_lost_slices),
    (15, "attempt.nodes, attempt.growing", _v15_elastic_nodes),
    (16, "setup_cache: each archive's sha256", _v16_setup_cache_digests),
    (17, "job.owner, job.from_node", _v17_owners),
    (18, "lab_node, attempt.host_user", _v18_lab),
    (19, "quota, share_weight, budget, job.priority, job.waiting_for, job.evictions", _v19_scheduler),
    (20, "attempt.reported", _v20_reported),
]

_bookkeeping = MetaData()
_migration = Table(
    MIGRATION_TABLE, _bookkeeping,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String, nullable=False),
    Column("applied_at", Float, nullable=False),
)


def applied_versions(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        if not inspect(conn).has_table(MIGRATION_TABLE):
            return []
        return [row[0] for row in conn.execute(_migration.select().order_by(_migration.c.version))]


def is_current(engine: Engine) -> bool:
    """Whether the latest migration is applied: one read, no lock, on every open of a store."""
    try:
        rows = fetch_all(engine, select(func.max(_migration.c.version)))
    except engine.dialect.loaded_dbapi.Error:  # no bookkeeping table yet: a blank database
        return False
    latest = rows[0][0]
    return latest is not None and latest >= MIGRATIONS[-1][0]


# Any fixed 64-bit number, the same in every tpujob process: the advisory lock's name.
_MIGRATION_LOCK = 0x7470756A6F62  # "tpujob"


def _one_at_a_time(conn: Connection) -> None:
    """Hold the store's migration lock until this transaction ends. SQLite's write transactions
    take the database's write lock up front (BEGIN IMMEDIATE, db.py). PostgreSQL's do not: two
    processes would both find a table missing and both create it, the second failing with
    DuplicateTable, so a transaction-level advisory lock serialises them there."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))


def migrate(engine: Engine, backup: Callable[[int], object] | None = None) -> list[int]:
    """Apply every migration not applied yet; return the versions applied now.

    Each migration and its bookkeeping row commit together, so a crash leaves the schema at a
    known version. Two processes opening a fresh store at once: the loser's insert of the same
    version fails its transaction, and it re-reads what is applied. `backup(version)` is called
    once before the first migration of a store that has any (a new store has nothing to keep):
    a copy of the store as it is, at that version.
    """
    if is_current(engine):
        return []  # every command opens the store: no write lock, no table creation, no reflection
    with engine.begin() as conn:
        _one_at_a_time(conn)
        _bookkeeping.create_all(conn)
    done = set(applied_versions(engine))
    if backup is not None and done and any(version not in done for version, _, _ in MIGRATIONS):
        backup(max(done))
    applied = []
    for version, name, apply in MIGRATIONS:
        if version in done:
            continue
        try:
            with engine.begin() as conn:
                _one_at_a_time(conn)
                if conn.execute(_migration.select().where(_migration.c.version == version)).first():
                    continue
                apply(conn)
                conn.execute(_migration.insert().values(version=version, name=name, applied_at=time.time()))
        except Exception:
            if version in set(applied_versions(engine)):
                continue  # another process applied it first
            raise
        applied.append(version)
    return applied
