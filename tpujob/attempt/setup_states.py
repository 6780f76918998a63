"""Each host's setup of an attempt as decide sees it (reconcile.observation.SetupSeen): its state,
and where one failed, the cause in the host's own words (hosts.host_output), bounded and redacted."""

from __future__ import annotations

from collections.abc import Sequence

from tpujob.attempt import setup_cache
from tpujob.hosts import program
from tpujob.hosts.fanout import HostResult
from tpujob.hosts.host_output import cause, said
from tpujob.hosts.program import SetupStatus
from tpujob.reconcile.observation import Setup, SetupSeen

_STATES = {"absent": Setup.ABSENT, "running": Setup.RUNNING, "done": Setup.DONE,
           "unreachable": Setup.UNREACHABLE}


def seen(statuses: Sequence[SetupStatus], timeout: float, hidden: tuple[str, ...]) -> SetupSeen:
    """The hosts' setup states as decide sees them; the first host whose setup failed (or
    vanished without an exit code) gives the cause, in setup's words (hosts.host_output)."""
    refused = next((s for s in statuses if s.state == "refused"), None)
    if refused is not None:
        return SetupSeen(tuple(Setup.UNREACHABLE for _ in statuses),
                         refused=f"setup on host {refused.index}: {refused.error}")
    error = None
    for s in statuses:
        if s.state not in ("failed", "lost"):
            continue
        result = HostResult(s.index, exit_code=s.exit_code, stderr=s.said,
                            error="" if s.exit_code is not None else "setup ended without an exit code (killed?)")
        if s.exit_code == program.TIMED_OUT:
            last = said(result, hidden)
            error = (f"setup on host {s.index} timed out after {timeout:.0f}s (the job's setup timeout for "
                     f"{len(statuses)} hosts)" + (f": {last}" if last else ""))
        else:
            error = f"setup on host {s.index}: {cause(result, hidden)}"
        break
    return SetupSeen(tuple(_STATES.get(s.state, Setup.RUNNING) for s in statuses), error=error,
                     cache=setup_cache.describe([s.cache for s in statuses]))
