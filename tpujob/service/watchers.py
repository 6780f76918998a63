"""Who will re-queue this store's jobs after a preemption: its cron entry, or a running
`tpujob watch`. A preempted job with nothing sweeping stays PREEMPTED for good, silently:
`create` and `doctor` say so.

Each `watch` registers itself as `$TPUJOB_HOME/watchers/PID.json` (host, pid, the process's
start time, the interval), touched after every sweep and removed when it exits. A watcher
whose process is gone (killed without its `finally`) or whose file has not been touched for
several intervals (a hung sweep, or a watch on another login node sharing the home) no longer
counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tpujob import settings as settings_mod
from tpujob.errors import ConfigError

FIX = "tpujob cron install --every 5m"
_SLACK_SECONDS = 600.0  # a sweep of many jobs (creates, setups) may take minutes


@dataclass(frozen=True)
class Watcher:
    pid: int
    host: str
    interval: float
    last_sweep: float  # when its file was last touched (epoch seconds)


@dataclass(frozen=True)
class Sweepers:
    cron_line: str | None  # this store's crontab line, or None
    watchers: tuple[Watcher, ...]
    cron_problem: str = ""  # why the crontab could not be read (e.g. no crontab program)

    @property
    def any(self) -> bool:
        return self.cron_line is not None or bool(self.watchers)


def watchers_dir() -> Path:
    return settings_mod.home() / "watchers"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): a pid
    reused by another process has another start time. None where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or _start_time(pid) in (None, started)


@contextlib.contextmanager
def watching(interval: float) -> Iterator[Path]:
    """Register this process as a watcher for the block; `touch` the yielded file per sweep."""
    directory = settings_mod.private_dir(watchers_dir())
    path = directory / f"{os.getpid()}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": _start_time(os.getpid()), "interval": interval}))
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def running_watchers(now: float | None = None) -> list[Watcher]:
    """The `tpujob watch` processes sweeping this store now."""
    now = time.time() if now is None else now
    found = []
    try:
        paths = sorted(watchers_dir().glob("*.json"))
    except OSError:
        return []
    here = socket.gethostname()
    for path in paths:
        try:
            data = json.loads(path.read_text())
            touched = path.stat().st_mtime
            pid, host, interval = int(data["pid"]), str(data["host"]), float(data["interval"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if now - touched > 3 * interval + _SLACK_SECONDS:
            continue
        if host == here and not _alive(pid, data.get("started")):
            continue
        found.append(Watcher(pid, host, interval, touched))
    return found


def find() -> Sweepers:
    """This store's cron entry and running watchers."""
    from tpujob.service import cron

    try:
        line, problem = cron.installed(), ""
    except ConfigError as exc:  # no crontab program, or `crontab -l` failed
        line, problem = None, exc.message
    return Sweepers(line, tuple(running_watchers()), problem)


def nothing_sweeps_message() -> str:
    return ("nothing will re-queue this job after a preemption: this store has no cron entry and "
            f"no `tpujob watch` is running; run `{FIX}`")
