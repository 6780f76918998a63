"""Job states and the one table of legal transitions. Pure data: no database import."""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

# A job's counters: the Job columns (and reconcile's JobView fields) that an attempt's end adds
# one to. Each is bounded by a budget (reconcile/budgets.py) but `flaps`, preemptions in a row of
# short runs that only lengthen the backoff, and `evictions`, attempts the lab's scheduler ended
# for a higher band (never a failure); `resume` sets them all back to 0. A Count or
# ResetCount names one of these, so a misspelt counter is mypy's error, not a sweep's AttributeError.
Counter = Literal["preemptions", "failures", "nan_restarts", "capacity_misses", "flaps", "bad_hosts", "hangs",
                  "evictions"]
COUNTERS: tuple[Counter, ...] = get_args(Counter)


class State(str, Enum):
    # Waiting for the lab's quota (docs/scheduler.md): never sent to Google; the sweep admits it
    # (to PENDING, or to RECOVERING when it already ran) in one transaction per decision.
    QUEUED = "QUEUED"
    PENDING = "PENDING"  # recorded (or admitted), nothing spent yet
    PROVISIONING = "PROVISIONING"  # slice (or queued resource) requested, not READY yet
    SETTING_UP = "SETTING_UP"  # slice READY: disks, buckets, sync, setup on every host
    RUNNING = "RUNNING"  # the program runs on every host
    RECOVERING = "RECOVERING"  # the attempt ended (preempted, NaN, retryable failure): next one coming
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # always with an end_reason
    CANCELLED = "CANCELLED"  # stopped by the user, slice kept; `resume` starts it again
    DELETED = "DELETED"  # cloud resources gone; the record stays until `clean`


class EndReason(str, Enum):
    USER_ERROR = "user_error"
    SETUP_FAILED = "setup_failed"
    NO_CAPACITY = "no_capacity"
    PREEMPTION_BUDGET = "preemption_budget"
    NAN_BUDGET = "nan_budget"
    BAD_HOST_BUDGET = "bad_host_budget"  # requeue.max_bad_hosts slices found bad in a row of attempts
    HANG_BUDGET = "hang_budget"  # requeue.max_hangs hung attempts
    INTERNAL = "internal"
    SSH_REFUSED = "ssh_refused"  # the hosts refused tpujob's SSH key (OS Login, a role)
    BUDGET = "budget"  # its max_cost, or its owner's budget for the period, reached (docs/scheduler.md)


class AttemptEnd(str, Enum):
    """Why one attempt ended (Attempt.end_reason); the job's own end is an EndReason."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the program exited non-zero
    SETUP_FAILED = "setup_failed"
    NAN = "nan"
    HUNG = "hung"  # no progress (heartbeat, or run.hang_seconds of log) on live hosts: ended
    PREEMPTED = "preempted"  # the slice was lost
    RESIZED = "resized"  # elastic multislice: checkpointed to go on with the slices grown back
    NO_CAPACITY = "no_capacity"  # a stockout, a queue or provisioning timeout
    REFUSED = "refused"  # the create was refused for good
    UNAVAILABLE = "unavailable"  # the zone does not offer the accelerator
    NO_QUOTA = "no_quota"  # a spent quota, moved on to another region
    NO_ZONE_QUOTA = "no_zone_quota"  # a spent zonal quota, moved on to another zone
    LOCATION_DENIED = "location_denied"  # the project may not use the zone (LOCATION_POLICY_VIOLATED)
    CANCELLED = "cancelled"
    DELETED = "deleted"
    SSH_REFUSED = "ssh_refused"  # the hosts answered SSH but refused tpujob's key
    # The program's log showed a known bad-host signature (a TPU held by another process): the
    # slice is replaced, never set up again (tpujob/hosts/bad_host.py).
    BAD_HOST = "bad_host"
    # Stopped (checkpoint signal, then its grace) and its slice freed for a higher band's job
    # waiting on the lab's quota (reconcile/admission.py): back to QUEUED, no budget spent.
    EVICTED = "evicted"
    BUDGET = "budget"  # stopped (checkpoint signal, grace): a cost cap was reached


_ACTIVE_EXITS = {State.FAILED, State.CANCELLED, State.DELETED}

# Every legal move. A move not listed here raises IllegalTransition (exit 4).
TRANSITIONS: dict[State, frozenset[State]] = {
    # Admitted: a first attempt (PENDING) or the next one of a job that ran before (RECOVERING).
    State.QUEUED: frozenset({State.PENDING, State.RECOVERING, *_ACTIVE_EXITS}),
    State.PENDING: frozenset({State.PROVISIONING, *_ACTIVE_EXITS}),
    State.PROVISIONING: frozenset({State.SETTING_UP, State.RECOVERING, *_ACTIVE_EXITS}),
    State.SETTING_UP: frozenset({State.RUNNING, State.RECOVERING, *_ACTIVE_EXITS}),
    State.RUNNING: frozenset({State.SUCCEEDED, State.RECOVERING, State.QUEUED, *_ACTIVE_EXITS}),  # QUEUED: evicted
    # A new attempt: a new slice (PROVISIONING) or, when the old slice is healthy, set it up again.
    State.RECOVERING: frozenset({State.PROVISIONING, State.SETTING_UP, *_ACTIVE_EXITS}),
    # A successful run is never re-run: the only way out is deleting its resources.
    State.SUCCEEDED: frozenset({State.DELETED}),
    # `resume` starts a new attempt of a failed or cancelled job.
    # QUEUED: resumed, its slice gone, under a lab's quota (it waits for its chips again).
    State.FAILED: frozenset({State.RECOVERING, State.QUEUED, State.DELETED}),
    State.CANCELLED: frozenset({State.RECOVERING, State.QUEUED, State.DELETED}),
    State.DELETED: frozenset(),
}

# States a sweep never touches, and in which the job holds no running program.
ENDED: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED, State.DELETED})
ACTIVE: frozenset[State] = frozenset(set(State) - ENDED)


def is_legal(src: State, dst: State) -> bool:
    return dst in TRANSITIONS[src]
