"""The emulator as a background process: start, stop, status.

Its files live under $TPUJOB_HOME/emulator/: `endpoints.json` (written by the process once it
serves: pid, endpoints, project, ssh port), `emulator.log`, and the hosts' filesystems.

Whether it runs is a lock, not an answer: the serving process holds `emulator.lock` for its
whole life, and the kernel lets go of it when the process dies, however it dies. An emulator
that is alive but slow to answer (two cores under a suite's load, eight sweeps at once) is
still running: asking it with a timeout instead once made a command start a second emulator in
the same directory, whose empty cloud then answered every later command. `start.lock` makes
starters take turns, so two commands that find none running start one between them.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import IO

from tpujob.emulator.client import EmulatorClient
from tpujob.emulator.machines.reaper import start_time
from tpujob.errors import CloudError, NotFoundError
from tpujob.settings import home, private_dir

ENDPOINTS_FILE = "endpoints.json"
LOG_FILE = "emulator.log"
SERVING_LOCK = "emulator.lock"  # held by the serving process while it lives
START_LOCK = "start.lock"       # held by a command while it starts one


def state_dir() -> pathlib.Path:
    """$TPUJOB_HOME/emulator, or TPUJOB_EMULATOR_DIR: several stores can share one emulator."""
    override = os.environ.get("TPUJOB_EMULATOR_DIR")
    return pathlib.Path(override) if override else home() / "emulator"


def status() -> dict | None:
    """The running emulator's endpoints (as in endpoints.json plus `log_file`), or None. Asks
    the kernel, not the emulator: a busy emulator is a running one."""
    directory = state_dir()
    try:
        info = json.loads((directory / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not _alive(info.get("pid", 0), info.get("started")) or not _served(directory):
        return None
    return {**info, "log_file": str(directory / LOG_FILE)}


def claim(directory: pathlib.Path, patience: float = 1.0) -> IO[str] | None:
    """For the emulator process itself: the serving lock on `directory`, held while the
    returned file stays open; None when another process serves it already. Tried for
    `patience` seconds: status() holds the lock shared for an instant when it looks."""
    private_dir(directory)
    lock = open(directory / SERVING_LOCK, "a+")
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.close()
                return None
            time.sleep(0.05)


def start(provisioning_delay: float | None = None, hosts: bool = True,
          timeout: float = 30.0, image_env: dict[str, str] | None = None) -> dict:
    """Start the emulator in the background unless it runs already; its endpoints.
    `image_env`: set in every session on every host (`--image-env`)."""
    running = status()
    if running:
        return running
    if hosts:  # refused here, in one line, rather than as a failed mount on a host later
        from tpujob import preflight

        preflight.require_emulator()
    directory = private_dir(state_dir())
    with open(directory / START_LOCK, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)  # released when the file closes
        return status() or _spawn(directory, provisioning_delay, hosts, timeout, image_env)


def _spawn(directory: pathlib.Path, provisioning_delay: float | None, hosts: bool,
           timeout: float, image_env: dict[str, str] | None) -> dict:
    (directory / ENDPOINTS_FILE).unlink(missing_ok=True)
    command = [sys.executable, "-m", "tpujob.emulator", "--state-dir", str(directory)]
    if provisioning_delay is not None:
        command += ["--provisioning-delay", str(provisioning_delay)]
    if not hosts:
        command.append("--no-hosts")
    for name, value in (image_env or {}).items():
        command += ["--image-env", f"{name}={value}"]
    with open(directory / LOG_FILE, "ab") as log:
        # A session of its own: the emulator outlives the command that started it.
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = status()
        if info and info.get("pid") == child.pid:
            return info
        if child.poll() is not None:
            raise CloudError(f"the emulator exited at start (code {child.returncode}); "
                             f"see {directory / LOG_FILE}: {_last_line(directory / LOG_FILE)}")
        time.sleep(0.05)
    _terminate(child.pid, grace=2)  # our child: its pid is ours until reaped
    raise CloudError(f"the emulator did not start serving within {timeout:g} s; "
                     f"see {directory / LOG_FILE}")


def stop(grace: float = 10.0) -> bool:
    """Stop the background emulator (SIGTERM, SIGKILL after `grace` s); False if none ran.
    Returns once its hosts are gone too: those its close did not end before a SIGKILL are
    ended by its reaper (machines/slice.py), which this waits for."""
    path = state_dir() / ENDPOINTS_FILE
    try:
        info = json.loads(path.read_text())
        pid = info["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    started = info.get("started")
    was_running = _alive(pid, started)
    if was_running:
        _terminate(pid, grace, started)
    reaper = info.get("reaper_pid")
    if isinstance(reaper, int) and _is_reaper(reaper):
        _await_exit(reaper, REAPER_PATIENCE)
    path.unlink(missing_ok=True)
    return was_running


# How long stop() waits for the reaper to end the hosts: bounds a hang only (reaper.py gives up
# on a namespace whose processes keep forking after its own PATIENCE_SECONDS).
REAPER_PATIENCE = 120.0


def _is_reaper(pid: int) -> bool:
    """Whether `pid` still runs the emulator's reaper (and not a process given its pid since)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[-2].endswith(b"/tpujob/emulator/machines/reaper.py")
    except (OSError, IndexError):
        return False


def _await_exit(pid: int, patience: float) -> None:
    """Wait until `pid`, not a child of ours, has exited (a zombie counts as gone: whether the
    process that adopted it reaps it is not ours to know)."""
    deadline = time.monotonic() + patience
    while start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


def ensure_running() -> dict:
    """The emulator's endpoints, starting it first if needed (for commands on the local cloud)."""
    return status() or start()


def client() -> EmulatorClient:
    """A client for the running emulator's fault endpoints."""
    info = status()
    if not info:
        raise NotFoundError("the emulator is not running (start it with `tpujob emulator start`)")
    return EmulatorClient(info["tpu_endpoint"])


def _served(directory: pathlib.Path) -> bool:
    """Whether a process holds the serving lock on `directory`."""
    try:
        lock = open(directory / SERVING_LOCK)
    except OSError:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _alive(pid: int, started: str | None = None) -> bool:
    """Whether `pid` still runs, and is the process that started at `started` (field 22 of
    /proc/PID/stat, as the emulator recorded it) when given. A pid is reused once its process is
    reaped (pid_max is 32768 by default, and a suite forks thousands a minute), and the emulator
    is not always our child to reap: without the start time, a stop whose emulator had exited
    signalled whatever process had its pid since (seen: another emulator's host, SIGKILLed
    while it started)."""
    if pid <= 0:
        return False
    try:
        # Reap it first if it is our own child (tests start and stop in one process).
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return started is None or start_time(pid) == started


def _terminate(pid: int, grace: float, started: str | None = None) -> None:
    """SIGTERM, then SIGKILL after `grace` s; each signal only while `pid` is still the process
    that started at `started`."""
    if not _alive(pid, started):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid, started):
            return
        time.sleep(0.05)
    if not _alive(pid, started):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _alive(pid, started):
        time.sleep(0.05)


def _last_line(path: pathlib.Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
