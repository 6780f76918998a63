"""What the hosts answered, in the sweep's terms: a step's results as a failure to report (or a
host to retry), a program's status as a HostObservation, clean.sh's report in words."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tpujob.errors import HostsUnreachable, SetupFailed, SshAuthRefused
from tpujob.hosts import program
from tpujob.hosts.bad_host import bad_host_line
from tpujob.hosts.fanout import HostResult
from tpujob.hosts.host_output import cause, last_lines, redact, said
from tpujob.hosts.program import HostStatus
from tpujob.reconcile.observation import HostObservation, Program


def clean_report(output: str) -> str:
    """clean.sh's JSON line in words: "ended pids 12, 13; pid 14 still holds the TPU"."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError):
        return ""
    parts = []
    if data.get("ended"):
        parts.append("ended pid" + ("s " if len(data["ended"]) > 1 else " ") + ", ".join(map(str, data["ended"])))
    if data.get("held"):
        parts.append("the TPU is still held by pid" + ("s " if len(data["held"]) > 1 else " ")
                     + ", ".join(map(str, data["held"])))
    return "; ".join(parts)


# A native stack frame as abseil's failure signal handler prints it after "*** Check failure
# stack trace: ***" (`    @     0x7fec876e9f6a  xla::...Connect()`): dozens of them would fill a
# dead program's last lines, pushing out the F-line above them that says why it aborted.
_NATIVE_FRAME = re.compile(r"^[ \t]*@[ \t]+0x[0-9a-fA-F]+\b.*\n?", re.M)


def observation_of(s: HostStatus, hidden: tuple[str, ...] = ()) -> HostObservation:
    # A dead program's log: its last lines (native stack frames left out), bounded and masked
    # like a setup step's cause.
    tail: dict[str, Any] = dict(ended_at=s.ended_at, said=last_lines(_NATIVE_FRAME.sub("", s.log_tail), hidden) or None,
                bad_host=redact(line, hidden) if (line := bad_host_line(s.log_tail)) else None) \
        if s.log_tail or s.ended_at is not None else {}
    if s.state == "running":
        return HostObservation(Program.RUNNING, step=s.step, total=s.total, resumed_from=s.resumed_from,
                               log_age=s.log_age, progress_age=s.progress_age, reported=s.reported)
    if s.state == "exited":
        return HostObservation(Program.EXITED, s.exit_code, step=s.step, total=s.total,
                               resumed_from=s.resumed_from, reported=s.reported, **tail)
    if s.state == "unreachable":
        return HostObservation(Program.UNREACHABLE)
    if s.state == "refused":
        return HostObservation(Program.REFUSED)
    return HostObservation(Program.MISSING, **tail)  # absent or lost: no program where one was launched


def connection_ok(results: Sequence[HostResult], what: str, hidden: tuple[str, ...] = ()) -> None:
    """A host that could not be reached is not a setup failure: the sweep retries later. One
    that answered and refused tpujob's key is neither: SshAuthRefused (the job ends)."""
    for r in results:
        if r.auth_refused:
            raise SshAuthRefused(f"{what} on host {r.index}: {r.error}")
    for r in results:
        if r.exit_code is None:
            raise HostsUnreachable(f"{what} on host {r.index}: {cause(r, hidden)}")


def step_ok(results: Sequence[HostResult], what: str, hidden: tuple[str, ...]) -> None:
    """Sync, setup, launch: a host that could not be reached is retried by a later sweep; one
    where the step failed (an upload that could not be unpacked on a full disk, say) fails the
    attempt's setup, saying why."""
    connection_ok(results, what, hidden)
    failed = [r for r in results if not r.ok]
    if failed:
        raise SetupFailed(f"{what} on host {failed[0].index}: {cause(failed[0], hidden)}")


def setup_ok(results: Sequence[HostResult], what: str, timeout: float, hidden: tuple[str, ...]) -> None:
    """Mount and setup: a host that timed out or failed fails the attempt's setup (clearly
    saying which); one that could not be reached at all is retried by a later sweep."""
    for r in results:
        if r.timed_out or r.exit_code == program.TIMED_OUT:
            last = said(r, hidden)
            raise SetupFailed(f"{what} on host {r.index} timed out after {timeout:.0f}s "
                              f"(the job's setup timeout for {len(results)} hosts)"
                              + (f": {last}" if last else ""))
    step_ok(results, what, hidden)

