"""What a sweep sees of a job, as decide takes it: the slice's condition, each host's program
and setup, the run dir's word, and the job's own counts (JobView). Plain values: observe.py and
act's handlers (outcome.py) build them, decide.py reads them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from typing_extensions import assert_never

from tpujob.cloud.base import SlicePhase
from tpujob.runtime.contract import RunDirStatus
from tpujob.store.states import AttemptEnd, State


class SliceCondition(str, Enum):
    """A slice as decide acts on it. Two layers, not one idea written twice: the cloud's
    SlicePhase (cloud/base.py) says what the API says (QUEUED, PREEMPTED, FAILED, DELETING apart:
    cloud/multislice.py and the elastic growth tell them apart); a SliceCondition folds those
    into what decide does about them (condition_of, the one table) and adds the create's
    refusals, which no listing shows (observe.refusal_of). A state both layers have has one name
    in both (QUEUED, PROVISIONING, READY, STOPPING, GONE)."""
    GONE = "GONE"  # no node and no queued resource by the attempt's name
    QUEUED = "QUEUED"  # queued resource accepted, waiting for capacity
    PROVISIONING = "PROVISIONING"  # capacity found, node being created
    READY = "READY"
    LOST = "LOST"  # preempted, terminated, queued resource FAILED or SUSPENDED
    STOPPING = "STOPPING"  # a VM in its shutdown: lost, but its program may still be saving
    STOCKOUT = "STOCKOUT"  # the create was refused for capacity
    REFUSED = "REFUSED"  # the create was refused for good: bad request, permission, missing snapshot
    NO_QUOTA = "NO_QUOTA"  # the create was refused because a resource quota is spent
    UNAVAILABLE = "UNAVAILABLE"  # the create was refused: the zone does not offer the accelerator


def condition_of(phase: SlicePhase) -> SliceCondition:
    """The one table from the cloud's phase to decide's condition (mypy checks it is whole).
    DELETING is a slice on its way out: lost, as a preempted or failed one is."""
    if phase is SlicePhase.QUEUED:
        return SliceCondition.QUEUED
    if phase is SlicePhase.PROVISIONING:
        return SliceCondition.PROVISIONING
    if phase is SlicePhase.READY:
        return SliceCondition.READY
    if phase is SlicePhase.PREEMPTED or phase is SlicePhase.FAILED or phase is SlicePhase.DELETING:
        return SliceCondition.LOST
    if phase is SlicePhase.STOPPING:
        return SliceCondition.STOPPING
    if phase is SlicePhase.GONE:
        return SliceCondition.GONE
    assert_never(phase)


class Program(str, Enum):
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"  # no trace of a launch on the host (fresh host, or wiped)
    UNREACHABLE = "unreachable"
    REFUSED = "refused"  # the host answered SSH but refused tpujob's key: waiting cannot help


class Setup(str, Enum):
    """An attempt's setup on one host: it runs detached (as the program does), and the sweep
    moves the job on once every host's is DONE."""
    ABSENT = "absent"  # not started on this host (or never reached it)
    RUNNING = "running"
    DONE = "done"  # its marker (setup.done) is there
    UNREACHABLE = "unreachable"  # the host did not answer: setting up again sorts it out


@dataclass(frozen=True)
class SetupSeen:
    """What the hosts said of an attempt's setup (tpujob.attempt.hosts): each host's state,
    and where one failed or refused tpujob's key, why (what becomes the attempt's cause)."""
    hosts: tuple[Setup, ...]
    error: str | None = None
    refused: str | None = None
    cache: str | None = None  # the setup cache's hit or miss, in words (None: no cache)


@dataclass(frozen=True)
class HostObservation:
    program: Program
    exit_code: int | None = None
    step: int | None = None  # the runtime contract's heartbeat, where the program keeps one
    total: int | None = None  # ... and the step it runs to, where the heartbeat says
    resumed_from: int | None = None
    refusal: str | None = None  # REFUSED: why, and the fix (attempt.hosts words it)
    # Where the program ended without a word of its own (a non-zero exit, or gone without an
    # exit code): when it ended (to tell the host that died first), its last log lines (bounded
    # and masked, hosts/host_output.py) and the known bad-host line among them (hosts/bad_host.py).
    ended_at: float | None = None
    said: str | None = None
    bad_host: str | None = None
    log_age: float | None = None  # seconds since the program's log last grew
    progress_age: float | None = None  # seconds since the heartbeat's step or phase moved
    reported: dict[str, int] | None = None  # the heartbeat's ledger keys (runtime/contract.LEDGER_KEYS)


@dataclass(frozen=True)
class Observation:
    slice: SliceCondition
    hosts: tuple[HostObservation, ...] = ()  # observed only when the slice is READY and a program was launched
    setup_error: str | None = None  # the setup script failed on a host (not a connection error)
    # Since the node's own createTime: the provisioning phase alone, not the queue wait before it.
    # None while no node exists (a queued resource that has not created it yet).
    provisioning_seconds: float | None = None
    refusal: str | None = None  # the cloud's word on a REFUSED, NO_QUOTA or UNAVAILABLE create
    # The current attempt's run dir on GCS, only for a RUNNING job whose spec has one (files an
    # earlier attempt left are not this one's: the sweep leaves them out).
    run_dir: RunDirStatus | None = None
    launched: int | None = None  # act just launched the program on this many hosts
    # How far a NO_QUOTA or UNAVAILABLE refusal reaches: "zone" (a zonal quota, LOCATION_POLICY_
    # VIOLATED), "region"; None: a quota counts as regional, a placement as (accelerator, zone).
    scope: str | None = None
    holds_slice: bool = False  # the refused slice holds quota until deleted (a FAILED queued resource)
    ssh_refused: str | None = None  # setup met hosts refusing tpujob's SSH key: why, and the fix
    # Node.health, its description and symptoms, and Node.upcomingMaintenance's window: seconds until it
    # opens (<= 0: open) and its type (SCHEDULED, UNSCHEDULED), from the zone's one list call.
    health: str | None = None
    health_detail: str = ""
    maintenance_in_seconds: float | None = None
    maintenance_type: str = ""
    # SETTING_UP: each host's setup, where it was observed (empty: not observed). A failed one
    # is a setup_error, its cause in words.
    setup: tuple[Setup, ...] = ()
    setup_cache: str | None = None  # the setup cache's hit or miss, in words, once setup is done
    # A LOST slice the cloud calls FAILED, not PREEMPTED: why, in its words (a Compute Engine VM
    # stopped without a preemption: tpujob.cloud.compute_instances.phase_of); "" for a preemption.
    lost_why: str = ""
    lost_slices: tuple[int, ...] = ()  # multislice: the slices whose node is lost (LOST)
    # Elastic multislice, growing back: "creating", "ready" or "failed" (why: growth_error).
    growth: str | None = None
    growth_error: str = ""


@dataclass(frozen=True)
class JobView:
    state: State
    attempt: int
    preemptions: int
    failures: int
    nan_restarts: int
    hosts: int
    in_state_seconds: float  # since the last state change
    unhealthy_seconds: float | None = None  # since the slice was first seen unhealthy
    placements: int = 1  # the primary placement plus tpu.fallback entries
    placement: int = 0  # the current one's index
    regions: tuple[str, ...] = ()  # each placement's region, by index (empty: not needed)
    zones: tuple[str, ...] = ()  # each placement's zone, by index (empty: not needed)
    blocked_placements: frozenset[int] = frozenset()  # refused for good (reconcile.placement.blocked)
    keep_slice: bool = False
    reuse_slice: bool = False  # RECOVERING after a program failure: the slice itself is fine
    job_id: int = 0  # seeds the backoff's jitter
    capacity_misses: int = 0  # capacity misses in a row, since a slice last came up READY
    flaps: int = 0  # preemptions in a row after runs shorter than min_run_seconds
    last_end: AttemptEnd | None = None  # the current attempt's end reason, once it ended
    bad_hosts: int = 0  # attempts ended bad_host
    hangs: int = 0
    slices: int = 1  # the current attempt's
    growth_failed_seconds: float | None = None  # since growing back last failed (elastic)
    # A flex-start attempt older than its max_run_duration: Compute Engine deletes a flex-start
    # VM when it reaches it ("Compute Engine deletes the Flex-start VMs at the end of their run
    # duration", about-resize-requests-mig; tpujob's are DELETE): a slice gone then ran its run.
    run_limit_reached: bool = False
    evictions: int = 0
    # The lab's scheduler evicts this job for a higher band's (reconcile/admission.py): why.
    evict: str | None = None
    # A cost cap reached (reconcile/spending.py): why. The job stops with a checkpoint, for good.
    over_budget: str | None = None
