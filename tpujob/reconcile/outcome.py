"""What one of act's handlers tells the sweep (kopf's handler outcome and controller-runtime's
Result{RequeueAfter} / TerminalError are the models):

- done: carried out (it may bring what it saw: a slice just created, the program launched);
- refused(reason): the cloud turned the slice's create down; decide chooses what follows;
- setup_failed(cause): the setup script failed on a host; decide spends a failure;
- ssh_refused(cause): a host answered SSH but refused this node's login; decide leaves the
  job as it is (the node's problem, NodeRefused);
- retry_after: nothing more now (a transient cloud or SSH error); a later sweep tries.

A handler never moves the job itself: what it learned goes back to decide as an observation.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.cloud.base import Slice
from tpujob.reconcile.observation import Observation, SliceCondition


@dataclass(frozen=True)
class Outcome:
    kind: str  # "done" | "refused" | "setup_failed" | "ssh_refused" | "retry_after"
    reason: str = ""
    observed: Observation | None = None  # what decide is to decide on next, instead of a listing
    slice: Slice | None = None  # the slice as act last saw it (created, or read again)


def done(observed: Observation | None = None, slice_: Slice | None = None) -> Outcome:
    return Outcome("done", observed=observed, slice=slice_)


def refused(phase: SliceCondition, reason: str, scope: str | None = None) -> Outcome:
    return Outcome("refused", reason, observed=Observation(slice=phase, refusal=reason, scope=scope))


def setup_failed(cause: str, slice_: Slice) -> Outcome:
    return Outcome("setup_failed", cause, observed=Observation(slice=SliceCondition.READY, setup_error=cause),
                   slice=slice_)


def ssh_refused(cause: str, slice_: Slice) -> Outcome:
    """The hosts refused this node's login: decide leaves the job alone (never "unreachable")."""
    return Outcome("ssh_refused", cause, observed=Observation(slice=SliceCondition.READY, ssh_refused=cause),
                   slice=slice_)


def retry_after(reason: str) -> Outcome:
    return Outcome("retry_after", reason)
