"""What decide returns and act carries out, in order, under the job's lease: every state move a
sweep makes is a Move (or a StartAttempt) among these."""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.store.states import AttemptEnd, Counter, EndReason, State


@dataclass(frozen=True)
class Action:
    pass


@dataclass(frozen=True)
class StartAttempt(Action):
    """Open attempt N+1: create its slice (name derived from job id + N+1) and move to
    PROVISIONING, or, with reuse_slice, keep the current healthy slice and move to SETTING_UP."""
    next_placement: bool = False  # move on to the next placement (cycling back to the primary)
    reuse_slice: bool = False
    # Elastic multislice, on the ended attempt's nodes: `keep_survivors`, those of its slices not
    # lost; `grow`, all of them and the nodes grown for it. Both move to SETTING_UP.
    keep_survivors: bool = False
    grow: bool = False


@dataclass(frozen=True)
class CreateSlice(Action):
    """(Re-)issue the create of the current attempt's slice; an existing one is adopted."""


@dataclass(frozen=True)
class DeleteSlice(Action):
    """Delete the current attempt's node and queued resource (they hold quota); `lost_only`: of
    an elastic attempt, only the slices it lost (the others train on)."""
    lost_only: bool = False


@dataclass(frozen=True)
class GrowSlices(Action):
    """Elastic multislice: ask for the slices the current attempt lacks, without waiting; a
    later observation says when they are READY (or why not)."""


@dataclass(frozen=True)
class DropGrowth(Action):
    """The slices asked for to grow back did not come: delete what there is of them, and try
    again after the backoff."""
    why: str


@dataclass(frozen=True)
class SetUp(Action):
    """Prepare every host (disks, buckets, sync) and start its setup, detached: decide launches
    the program (Launch) once a later observation finds setup done on every host."""


@dataclass(frozen=True)
class Launch(Action):
    """Start the program on every host, once setup is done on each (`cache`: the setup cache's
    hit or miss, for the attempt's record)."""
    cache: str | None = None


@dataclass(frozen=True)
class StopProgram(Action):
    stacks: bool = False  # first ask every host for its Python stacks and keep them (a hang)
    survivors: bool = False  # of a multislice attempt that lost slices: on the others' hosts


@dataclass(frozen=True)
class EndAttempt(Action):
    reason: AttemptEnd


@dataclass(frozen=True)
class Count(Action):
    counter: Counter


@dataclass(frozen=True)
class ResetCount(Action):
    """Set a counter back to 0 with the next Move (capacity misses, once a slice is READY)."""
    counter: Counter


@dataclass(frozen=True)
class Move(Action):
    to: State
    message: str
    reason: EndReason | None = None


@dataclass(frozen=True)
class MarkUnhealthy(Action):
    why: str = ""  # which hosts did not answer or lost their program, or the heartbeat's age


@dataclass(frozen=True)
class ClearUnhealthy(Action):
    pass


@dataclass(frozen=True)
class NodeRefused(Action):
    """The hosts refused this node's login: a fact about the sweeping node (its key, its
    account's roles), never about the job, which is left as it is; act reports it."""
    why: str = ""
