"""The processes of emulated hosts (slice.py): a host's processes are exactly those whose
mount namespace is the host's, found by scanning /proc, so programs that detach with
setsid/nohup are followed without cgroups or pid files and preempt, kill_host and stop leave
nothing behind.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from tpujob.emulator.machines import gcsfuse

log = logging.getLogger(__name__)


def pids_by_namespace(namespaces: set, spare: frozenset[int] = frozenset()) -> dict[tuple[int, int], list[int]]:
    """Live processes grouped by mount namespace, for the namespaces asked about (but `spare`)."""
    found: dict[tuple[int, int], list[int]] = {}
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me or int(entry.name) in spare:
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/mnt")
        except OSError:   # gone, or a zombie (its namespace links are unreadable)
            continue
        ns = (st.st_dev, st.st_ino)
        if ns in namespaces:
            found.setdefault(ns, []).append(int(entry.name))
    return found


def has_contract_env(pid: int) -> bool:
    # TPUJOB_ATTEMPT: the runtime contract's variable that launch.sh exports to the program
    # (docs/runtime.md); the emulator names it here rather than import the product's code.
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(b"TPUJOB_ATTEMPT=") for v in f.read().split(b"\0"))
    except OSError:
        return False


def is_mount_daemon(pid: int) -> bool:
    """A FUSE mount's daemon (the emulated gcsfuse, which ignores SIGTERM so that a program's
    SIGTERM checkpoint still reaches the bucket). A guest's shutdown unmounts its file systems
    after every other process has stopped, so a mount alone does not keep a host up."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return gcsfuse.MODULE.encode() in f.read()
    except OSError:
        return False


def shutting_down(namespaces: set, spare: frozenset[int] = frozenset()) -> bool:
    """Whether a process other than a mount daemon still runs in `namespaces`: the hosts'
    shutdown is not over."""
    return any(not is_mount_daemon(pid) for pids in pids_by_namespace(namespaces, spare).values() for pid in pids)


def signal_each(pids: list[int], sig: int) -> int:
    """Signal each of `pids`; how many were still there to get it."""
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            pass
    return sent


def signal_all(namespaces: set, sig: int, spare: frozenset[int] = frozenset()) -> int:
    return sum(signal_each(pids, sig) for pids in pids_by_namespace(namespaces, spare).values())


def kill_all(namespaces: set, spare: frozenset[int] = frozenset()) -> None:
    # A process may fork while we scan: repeat until a scan finds nobody (but `spare`).
    namespaces = {ns for ns in namespaces if ns}
    deadline = time.monotonic() + 10
    while namespaces and signal_all(namespaces, signal.SIGKILL, spare):
        if time.monotonic() > deadline:
            log.warning("processes keep appearing in %s", namespaces)
            return
        time.sleep(0.01)
