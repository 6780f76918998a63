"""What this machine needs before tpujob starts something that would fail later, and the
command that installs what is missing.

The emulated TPU hosts (tpujob/emulator/machines/slice.py) are mount namespaces: each host's holder
runs `unshare --mount` and `mount --bind`/`mount -t tmpfs`, commands enter it with `nsenter -m`,
the host scripts test mounts with `mountpoint`; all of that takes root (unprivileged user
namespaces are not what they use). Their `gcsfuse` (tpujob/emulator/machines/gcsfuse.py) is
fusepy over libfuse 2, which fusepy finds as `FUSE_LIBRARY_PATH` or `find_library('fuse')`,
and mounts through /dev/fuse. `tpujob cron install` needs the `crontab` program.

Stdlib only: `list` and every other command may import it. The probes (which, find_library,
geteuid, ...) are module functions so that tests can replace them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable

from tpujob.errors import ConfigError

OK, WARNING, ERROR = "ok", "warning", "error"


@dataclass(frozen=True)
class Check:
    """One line of a checklist: what was checked, how it went, and the command that fixes it."""

    name: str
    status: str  # OK, WARNING or ERROR
    detail: str
    fix: str = ""  # the exact command (or step) that fixes it; "" when status is OK
    packages: tuple[str, ...] = ()  # Debian/Ubuntu packages that fix it (merged into one apt-get)

    def to_json_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


# ---- probes (replaced in tests) ----------------------------------------------------------------

def which(program: str) -> str | None:
    return shutil.which(program)


def geteuid() -> int:
    return os.geteuid()


def find_libfuse() -> str | None:
    """What fusepy would load on Linux: FUSE_LIBRARY_PATH, else find_library('fuse')."""
    return os.environ.get("FUSE_LIBRARY_PATH") or ctypes.util.find_library("fuse")


def load_library(path: str) -> None:
    ctypes.CDLL(path)  # fusepy's own next step: OSError when it cannot be loaded


def device_exists(path: str) -> bool:
    return os.path.exists(path)


def can_unshare_mount() -> str | None:
    """None when a mount namespace can be made here; else why not (a container without
    CAP_SYS_ADMIN refuses even root)."""
    try:
        result = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit {result.returncode}")


# ---- checks ------------------------------------------------------------------------------------

def apt_install(*packages: str) -> str:
    """The install line for Debian/Ubuntu packages, with sudo when we are not root."""
    return f"{'' if geteuid() == 0 else 'sudo '}apt-get install -y {' '.join(packages)}"


def root_check() -> Check:
    if geteuid() == 0:
        why = can_unshare_mount() if which("unshare") else None
        if why:
            return Check("root", ERROR, f"running as root, but a mount namespace is refused: {why}",
                         "run it on a VM or in a privileged container (docker run --privileged)")
        return Check("root", OK, "running as root; mount namespaces work")
    return Check("root", ERROR, "the emulated hosts are mount namespaces (unshare --mount, "
                 "mount --bind), which need root", 'run tpujob as root: sudo -E env "PATH=$PATH" tpujob ...')


# (program, Debian/Ubuntu package holding it, what needs it)
_PROGRAMS = (
    ("unshare", "util-linux", "each emulated host's mount namespace"),
    ("nsenter", "util-linux", "running commands on an emulated host"),
    ("mountpoint", "util-linux", "the host scripts' mount checks"),
    ("mount", "mount", "each emulated host's own /mnt, /home, /root, /tmp"),
)


def program_checks() -> list[Check]:
    checks = []
    for program, package, purpose in _PROGRAMS:
        found = which(program)
        if found:
            checks.append(Check(program, OK, found))
        else:
            checks.append(Check(program, ERROR, f"`{program}` not found on PATH (needed for {purpose})",
                                apt_install(package), (package,)))
    return checks


def fuse_device_check() -> Check:
    if device_exists("/dev/fuse"):
        return Check("/dev/fuse", OK, "present")
    return Check("/dev/fuse", ERROR, "/dev/fuse is missing: the emulated gcsfuse cannot mount buckets",
                 "modprobe fuse (in a container: docker run --device /dev/fuse --cap-add SYS_ADMIN)")


def libfuse_check() -> Check:
    path = find_libfuse()
    fix = apt_install("fuse", "libfuse2")
    if not path:
        return Check("libfuse", ERROR, "libfuse 2 not found (fusepy: find_library('fuse')): the emulated "
                     "gcsfuse cannot mount buckets", fix, ("fuse", "libfuse2"))
    try:
        load_library(path)
    except OSError as exc:
        return Check("libfuse", ERROR, f"libfuse 2 found at {path} but cannot be loaded: {exc}",
                     fix, ("fuse", "libfuse2"))
    return Check("libfuse", OK, path)


def crontab_check() -> Check:
    found = which("crontab")
    if found:
        return Check("crontab", OK, found)
    return Check("crontab", ERROR, "the `crontab` program is not installed (`tpujob cron install` needs it)",
                 apt_install("cron"), ("cron",))


def emulator_checks() -> list[Check]:
    """What the emulated hosts need: root, the namespace tools, /dev/fuse and libfuse 2."""
    return [root_check(), *program_checks(), fuse_device_check(), libfuse_check()]


def require_emulator() -> None:
    """Refuse (exit 6) before anything is started or recorded when the emulated hosts would
    fail on this machine (`tpujob demo`, starting the emulator with hosts)."""
    require(emulator_checks(), "the emulated TPU hosts cannot run on this machine")


def require(checks: Iterable[Check], what: str) -> None:
    """ConfigError (exit 6) in one line naming every failing check and the command(s) that fix
    them (apt packages merged into one apt-get line); nothing when all pass."""
    failing = [c for c in checks if c.status == ERROR]
    if not failing:
        return
    packages = list(dict.fromkeys(p for c in failing for p in c.packages))
    fixes = [apt_install(*packages)] if packages else []
    fixes += list(dict.fromkeys(c.fix for c in failing if not c.packages and c.fix))
    missing = "; ".join(c.detail for c in failing)
    raise ConfigError(f"{what}: {missing}. Fix: {'; '.join(fixes)}")
