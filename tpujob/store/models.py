"""SQLModel tables. The schema itself is owned by migrations.py; a test keeps the two equal."""

from __future__ import annotations

from typing import Optional

from sqlmodel import Field, SQLModel


class Job(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True)
    state: str = Field(index=True)
    end_reason: Optional[str] = None
    spec_yaml: str  # the spec as submitted, for the record and for `show`
    spec_json: str  # the resolved spec every later attempt is made from
    accelerator: str
    zone: str
    project: str
    cloud: str  # "local" (the emulator) or "gcp"
    attempt: int = 0  # number of the current attempt; 0 before the first slice
    preemptions: int = 0
    failures: int = 0
    nan_restarts: int = 0
    keep_slice: bool = False
    host0_ip: Optional[str] = None
    created_at: float
    updated_at: float
    ended_at: Optional[float] = None
    observed_at: Optional[float] = None  # when a sweep last looked at this job's slice
    lease_owner: Optional[str] = None
    lease_expires: Optional[float] = None
    state_since: Optional[float] = None
    unhealthy_since: Optional[float] = None
    placement: int = 0
    running_seconds: float = 0.0
    capacity_misses: int = 0  # capacity misses in a row (stockouts, queue timeouts) since READY
    flaps: int = 0  # preemptions in a row of attempts that ran under requeue.min_run_seconds
    bad_hosts: int = 0  # attempts ended bad_host (requeue.max_bad_hosts)
    hangs: int = 0  # attempts ended hung (requeue.max_hangs)


class Attempt(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    number: int
    slice_name: str
    zone: str
    accelerator: str
    queued: bool
    started_at: float
    ended_at: Optional[float] = None
    end_reason: Optional[str] = None
    last_step: Optional[int] = None
    resumed_from_step: Optional[int] = None
    host_keys: Optional[str] = None  # JSON {host index: [OpenSSH public key lines]}
    cause: Optional[str] = None  # why it ended, in words: the message of the move that ended it
    total_steps: Optional[int] = None  # the heartbeat's total, where the program says it
    progress: Optional[str] = None  # JSON [[time, step], ...] of the last minutes (tpujob/progress.py)
    create_operation: Optional[str] = None  # the node create's operation, while it may still say why
    slices: int = 1  # multislice: the attempt's nodes are SLICE_NAME-0 .. -(slices-1)
    lost_slices: Optional[str] = None  # multislice: the slices it ended on losing, "1" or "0,1"
    # Elastic multislice: its nodes when not NAME-0..N-1 (space-separated: the slices kept from
    # the attempt before, then those grown for it), and the nodes being created to grow it back
    # (JSON {node: create operation}, plus "failed_at" once a try failed).
    nodes: Optional[str] = None
    growing: Optional[str] = None


class Event(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    at: float
    kind: str
    message: str
    from_state: Optional[str] = None
    to_state: Optional[str] = None


class Outbox(SQLModel, table=True):
    """A notification to send (store/outbox.py): pending, then sent or gave_up."""
    id: Optional[int] = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    event_id: int
    channel: int  # index into the spec's notify list
    kind: str  # succeeded | failed | preempted | nan | cancelled | test
    text: str
    status: str = Field(index=True)
    created_at: float
    next_try: float
    attempts: int = 0
    last_error: Optional[str] = None
    claimed_by: Optional[str] = None
    claim_expires: Optional[float] = None
    sent_at: Optional[float] = None
