"""`tpujob doctor`: a checklist of what makes jobs fail, each item ok / warning / error with the
command that fixes it. Local items here; the cloud's (credentials, project, APIs, zones,
buckets) in doctor_cloud.py.

Every check only looks: nothing is started, created or changed (the store is opened, which
creates and migrates it like any command does, and takes a write that is rolled back).
"""

from __future__ import annotations

import shlex
import stat
from dataclasses import dataclass, replace

from tpujob import preflight
from tpujob.errors import TpujobError
from tpujob.preflight import ERROR, OK, WARNING, Check
from tpujob.service.context import Context


@dataclass(frozen=True)
class Report:
    local: list[Check]
    cloud: list[Check]

    @property
    def errors(self) -> list[Check]:
        return [c for c in self.local + self.cloud if c.status == ERROR]

    def to_json_dict(self) -> dict:
        return {"ok": not self.errors, "local": [c.to_json_dict() for c in self.local],
                "cloud": [c.to_json_dict() for c in self.cloud]}


def run(ctx: Context) -> Report:
    from tpujob.service import doctor_cloud

    store, jobs = store_check(ctx)
    local = [store, home_check(ctx), ssh_key_check(ctx), secrets_check(),
             sweeper_check(jobs), *([store_clock_check(ctx), lab_check(ctx)] if jobs is not None else []),
             *emulator_checks(ctx.settings.cloud)]
    return Report(local, doctor_cloud.checks(ctx, jobs))


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def store_check(ctx: Context) -> tuple[Check, list | None]:
    """The store opens (and migrates) and takes a write; its active jobs, or None when it did
    not open."""
    from tpujob.settings import redact_url, redact_urls_in
    from tpujob.store.db import check_writable

    where = redact_url(ctx.settings.database_url)
    try:
        jobs = ctx.store.list_jobs(include_ended=False)
    except TpujobError as exc:
        return Check("store", ERROR, exc.message,
                     "check TPUJOB_DB_URL or db_url in $TPUJOB_HOME/config.yaml (tpujob config show)"), None
    except Exception as exc:  # a driver's own error (a locked or corrupt file, a bad server)
        return Check("store", ERROR, f"cannot open {where}: {type(exc).__name__}: {redact_urls_in(str(exc))}",
                     "check TPUJOB_DB_URL or db_url in $TPUJOB_HOME/config.yaml (tpujob config show)"), None
    try:  # a store that reads but refuses writes fails the first move of every sweep
        check_writable(ctx.store.engine, ctx.settings.database_url)
    except TpujobError as exc:
        return Check("store", ERROR, exc.message, "make the store and its directory writable by this user, "
                     "or point TPUJOB_DB_URL at one that is"), jobs
    found = f"{where}: {len(jobs)} active job{'' if len(jobs) == 1 else 's'}, writable"
    loose = [path for path in _sqlite_files(ctx.settings.database_url) if _mode(path) & 0o077]
    if loose:
        # Made 0600 since tpujob makes it (settings.private_file); an older store, or one
        # copied in, keeps its mode: said here, changed by the user.
        return Check("store", WARNING, f"{found}; {loose[0]} is readable by group or others (mode "
                     f"{_mode(loose[0]):o}): they can read every job's spec and events",
                     f"chmod 600 {' '.join(shlex.quote(str(p)) for p in loose)}"), jobs
    return Check("store", OK, found), jobs


def _sqlite_files(url: str) -> list:
    """A SQLite store's files that exist (the database, its -wal and -shm); none for a server."""
    from pathlib import Path

    from tpujob.store.db import sqlite_file

    path = sqlite_file(url)
    if path is None:
        return []
    return [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]


def home_check(ctx: Context) -> Check:
    """$TPUJOB_HOME holds the store, the SSH key, secrets.env, the hosts' logs and what cron
    runs: nobody else may write there (an error), nor read there (a warning: tpujob makes it
    0700, settings.private_dir; an older one keeps its mode)."""
    home = ctx.settings.home
    if not home.exists():
        return Check("home", OK, f"{home} (not created yet)")
    mode = _mode(home)
    fix = f"chmod 700 {shlex.quote(str(home))}"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return Check("home", ERROR, f"{home} is writable by group or others (mode {mode:o}): they could "
                     "replace the store, the SSH key or secrets.env", fix)
    if mode & 0o077:
        return Check("home", WARNING, f"{home} is open to group or others (mode {mode:o}): they can read "
                     "the hosts' logs and whatever else in it is not mode 600", fix)
    return Check("home", OK, f"{home} (mode {mode:o})")


def ssh_key_check(ctx: Context) -> Check:
    from tpujob.hosts.keys import key_path

    path = key_path(ctx.settings.home)
    if not path.exists():
        return Check("ssh key", OK, f"{path} (made on the first create)")
    mode = _mode(path)
    if mode & 0o077:
        return Check("ssh key", ERROR, f"{path} is readable by group or others (mode {mode:o})",
                     f"chmod 600 {shlex.quote(str(path))}")
    if not path.with_suffix(".pub").exists():
        return Check("ssh key", WARNING, f"{path}.pub is missing (rebuilt from the private key on next use)")
    return Check("ssh key", OK, f"{path} (mode {mode:o})")


def secrets_check() -> Check:
    from tpujob.attempt.secrets import read_file, secrets_file
    from tpujob.errors import ConfigError

    path = secrets_file()
    if not path.exists():
        return Check("secrets.env", OK, f"{path} absent (secrets come from the environment)")
    try:
        names = read_file(path)
    except ConfigError as exc:
        loose = _mode(path) & 0o077
        fix = f"chmod 600 {shlex.quote(str(path))}" if loose else f"edit {path}: KEY=VALUE lines"
        return Check("secrets.env", ERROR, exc.message, fix)
    return Check("secrets.env", OK, f"{path} (mode {_mode(path):o}, {len(names)} values)")


def sweeper_check(jobs: list | None) -> Check:
    """A cron entry or a running watch re-queues preempted jobs; without either, a preempted
    job stays PREEMPTED: an error while jobs are active, a warning before the first."""
    from tpujob.service import watchers

    found = watchers.find()
    if found.cron_line is not None:
        schedule = " ".join(found.cron_line.split()[:5])
        return Check("sweeper", OK, f"cron entry, schedule {schedule} (tpujob cron show)")
    if found.watchers:
        pids = ", ".join(f"{w.pid}@{w.host}" for w in found.watchers)
        return Check("sweeper", OK, f"tpujob watch running ({pids})")
    active = len(jobs or [])
    detail = "no cron entry for this store and no `tpujob watch` running: a preempted job is never re-queued"
    if found.cron_problem:
        detail += f" ({found.cron_problem})"
    if active:
        return Check("sweeper", ERROR, f"{detail}; {active} active job{'' if active == 1 else 's'}",
                     watchers.FIX)
    return Check("sweeper", WARNING, detail, watchers.FIX)


# Past this, a clock is worth fixing: tpujob judges on the store's and Google's clocks whatever
# this node's says, but Google's credentials and TLS are judged against it too.
SKEW_WARNING_SECONDS = 60.0
CLOCK_FIX = "sync this node's clock (NTP: timedatectl set-ntp true, or chrony)"


def skew_text(node_minus_other: float, other: str) -> str:
    """"this node's clock is 600 s ahead of OTHER's" (or behind, or within a second)."""
    if abs(node_minus_other) < 1:
        return f"this node's clock agrees with {other} (within a second)"
    return (f"this node's clock is {abs(node_minus_other):.0f} s "
            f"{'ahead of' if node_minus_other > 0 else 'behind'} {other}")


def store_clock_check(ctx: Context) -> Check:
    """This node's clock against the store server's: what a lab's nodes write and judge every
    time on (store/clock.py), so a node minutes off decides as the others do."""
    from tpujob.store.clock import server_offset

    if ctx.store.engine.dialect.name != "postgresql":
        return Check("clock: store", OK, "the store is a file on this machine: one clock")
    try:
        offset = server_offset(ctx.store.engine)
    except Exception as exc:  # noqa: BLE001 - a check reports, never raises
        return Check("clock: store", WARNING, f"could not read the store server's clock: {type(exc).__name__}")
    detail = (skew_text(-offset, "the store server's") + "; tpujob writes and judges every time on the "
              "server's clock")
    if abs(offset) > SKEW_WARNING_SECONDS:
        return Check("clock: store", WARNING, detail, CLOCK_FIX)
    return Check("clock: store", OK, detail)


def lab_check(ctx: Context) -> Check:
    """The nodes sharing this store (Store.register_node, store/repository.py): their keys go on every new slice."""
    from tpujob.durations import duration_text

    nodes = ctx.store.lab_nodes()
    if not nodes:
        return Check("lab", OK, "no node has swept or created on this store yet (each registers its SSH key "
                     "on its first sweep or create)")
    now = ctx.store.clock()
    seen = "; ".join(f"{n.name} (seen {duration_text(max(0.0, now - n.last_seen))} ago)" for n in nodes)
    return Check("lab", OK, f"{len(nodes)} node{' shares' if len(nodes) == 1 else 's share'} this store, each key on "
                 f"every new slice: {seen}")


def emulator_checks(cloud: str) -> list[Check]:
    """The emulated hosts' prerequisites: errors on the local cloud, warnings on gcp (where
    only `tpujob demo` and the tests need them)."""
    checks = [replace(c, name=f"emulator: {c.name}") for c in preflight.emulator_checks()]
    if cloud == "local":
        return checks
    return [replace(c, status=WARNING, detail=f"{c.detail} (only the local emulator needs it)")
            if c.status == ERROR else c for c in checks]
