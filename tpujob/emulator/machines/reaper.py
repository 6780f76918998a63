"""The hosts' reaper: ends every emulated host of a process once that process is gone, however
it went (slice.py starts one per process that starts hosts).

An emulated host is a `sleep infinity` holder in a session of its own and the processes in its
mount namespace (slice.py); none of them dies with the emulator. An emulator killed while it
closed (`tpujob emulator stop` sends SIGKILL after its grace; a test worker killed at a time-out)
left them all running: 184 holders and 184 programs that ignore SIGTERM after one benchmark.
This process learns of each holder on its stdin, a pipe whose other end only the emulator's
process holds, and reads it until end of file, which the kernel gives it when that process
ends, even by SIGKILL. Then it SIGKILLs every process in the namespaces of the holders still
there, until a scan of /proc finds none, and the holders last.

Lines on stdin: `holder PID STARTTIME` when a holder is spawned, `ns PID DEV INO` once its
namespace is known, `gone PID` once the emulator has ended it itself. A pid counts only while
its start time (field 22 of /proc/PID/stat) is the one recorded, so a pid reused after the
holder ended is never touched; a namespace is only searched while its holder lives, as a
namespace freed may give its id to the next one made (machines._pinned says the same).

Run as a script (`python -I reaper.py`): standard library only, nothing of tpujob imported.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# How long the scans go on while processes keep forking; then what is left is reported.
PATIENCE_SECONDS = 60.0


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (after the command's closing parenthesis, which may itself
    contain spaces); None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return fields[19].decode()


def namespace_of(pid: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def kill_namespaces(namespaces: set[tuple[int, int]], spare: set[int]) -> int:
    """SIGKILL every process in `namespaces` but `spare` until a scan finds none; how many were
    killed."""
    me, killed = os.getpid(), 0
    deadline = time.monotonic() + PATIENCE_SECONDS
    while namespaces:
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid == me or pid in spare or namespace_of(pid) not in namespaces:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                found += 1
            except ProcessLookupError:
                pass
        killed += found
        if not found:
            break
        if time.monotonic() > deadline:
            print(f"tpujob reaper: processes keep appearing in {len(namespaces)} host namespaces",
                  file=sys.stderr, flush=True)
            break
        time.sleep(0.01)
    return killed


def reap(holders: dict[int, str], namespaces: dict[int, tuple[int, int]]) -> int:
    """End the holders still running as recorded (pid -> start time) and every process in
    their namespaces; how many processes were killed."""
    live = {pid for pid, started in holders.items() if start_time(pid) == started}
    pinned = {namespaces[pid] for pid in live if pid in namespaces and namespace_of(pid) == namespaces[pid]}
    killed = kill_namespaces(pinned, spare=live)
    for pid in live:
        if start_time(pid) == holders[pid]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def main() -> None:
    # Its own session already (slice.py); a terminal's ^C or hang-up is for the emulator.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    holders: dict[int, str] = {}
    namespaces: dict[int, tuple[int, int]] = {}
    for line in sys.stdin:
        word, *args = line.split()
        if word == "holder":
            holders[int(args[0])] = args[1]
        elif word == "ns":
            namespaces[int(args[0])] = (int(args[1]), int(args[2]))
        elif word == "gone":
            holders.pop(int(args[0]), None)
            namespaces.pop(int(args[0]), None)
    killed = reap(holders, namespaces)
    if killed:
        print(f"tpujob reaper: the emulator's process ended with {len(holders)} hosts up; "
              f"killed {killed} processes", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
