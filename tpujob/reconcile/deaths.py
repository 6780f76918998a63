"""How a program's death is told (pure, for decide): which host died first, and what an exit
code means. The words themselves come from the hosts (hosts/program.status: the end of the
program's log, bounded and masked by attempt/hosts.py)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from tpujob.reconcile.observation import HostObservation


def exit_meaning(code: int | None) -> str:
    """` (SIGABRT: Aborted)` for 134: a shell reports a program killed by signal N as 128+N
    (bash(1), EXIT STATUS); the name and description are the signal module's. 126 and 127 are
    bash's own (found but not executable; not found). Empty for any other code."""
    if code is None:
        return ""
    if code in (126, 127):
        return " (command not executable)" if code == 126 else " (command not found)"
    if 128 < code < 128 + 65:
        try:
            sig = signal.Signals(code - 128)
        except ValueError:
            return ""
        return f" ({sig.name}: {signal.strsignal(sig)})"
    return ""


def first_died(hosts: Sequence[HostObservation]) -> tuple[int, HostObservation] | None:
    """The host whose program ended first among those that ended saying something (its log),
    with its index: in a multi-host job the others usually die of the first one's death."""
    spoke = [(i, h) for i, h in enumerate(hosts) if h.said or h.bad_host]
    if not spoke:
        return None
    return min(spoke, key=lambda ih: (ih[1].ended_at is None, ih[1].ended_at or 0.0, ih[0]))
