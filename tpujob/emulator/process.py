"""The emulator as a background process: start, stop, status.

Its files live under $TPUJOB_HOME/emulator/: `endpoints.json` (written by the process once it
serves: pid, endpoints, project, ssh port), `emulator.log`, and the hosts' filesystems.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from tpujob.emulator.client import EmulatorClient
from tpujob.errors import CloudError, NotFoundError, TpujobError
from tpujob.settings import home

ENDPOINTS_FILE = "endpoints.json"
LOG_FILE = "emulator.log"


def state_dir() -> pathlib.Path:
    """$TPUJOB_HOME/emulator, or TPUJOB_EMULATOR_DIR: several stores can share one emulator."""
    override = os.environ.get("TPUJOB_EMULATOR_DIR")
    return pathlib.Path(override) if override else home() / "emulator"


def status() -> dict | None:
    """The running emulator's endpoints (as in endpoints.json plus `log_file`), or None."""
    try:
        info = json.loads((state_dir() / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not _alive(info.get("pid", 0)):
        return None
    try:
        EmulatorClient(info["tpu_endpoint"], timeout=2).status()
    except TpujobError:
        return None
    return {**info, "log_file": str(state_dir() / LOG_FILE)}


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
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
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
    _terminate(child.pid, grace=2)
    raise CloudError(f"the emulator did not answer within {timeout:g} s; "
                     f"see {directory / LOG_FILE}")


def stop(grace: float = 10.0) -> bool:
    """Stop the background emulator (SIGTERM, SIGKILL after `grace` s); False if none ran."""
    path = state_dir() / ENDPOINTS_FILE
    try:
        pid = json.loads(path.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    was_running = _alive(pid)
    if was_running:
        _terminate(pid, grace)
    path.unlink(missing_ok=True)
    return was_running


def ensure_running() -> dict:
    """The emulator's endpoints, starting it first if needed (for commands on the local cloud)."""
    return status() or start()


def client() -> EmulatorClient:
    """A client for the running emulator's fault endpoints."""
    info = status()
    if not info:
        raise NotFoundError("the emulator is not running (start it with `tpujob emulator start`)")
    return EmulatorClient(info["tpu_endpoint"])


def _alive(pid: int) -> bool:
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
    return True


def _terminate(pid: int, grace: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _alive(pid):
        time.sleep(0.05)


def _last_line(path: pathlib.Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
