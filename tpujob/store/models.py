"""SQLModel tables. The schema itself is owned by migrations.py; a test keeps the two equal."""

from __future__ import annotations

from sqlmodel import Field, SQLModel

# Each table's `id` is typed `int`: the database gives it on flush, and every row the store
# returns, or a caller reads an id from, has one. Only a row just made in Python (before its
# session's flush) still holds the default None; SQLModel does not validate table models.


class Job(SQLModel, table=True):
    id: int = Field(default=None, primary_key=True)
    name: str = Field(index=True)
    state: str = Field(index=True)
    end_reason: str | None = None
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
    host0_ip: str | None = None
    created_at: float
    updated_at: float
    ended_at: float | None = None
    observed_at: float | None = None  # when a sweep last looked at this job's slice
    lease_owner: str | None = None
    lease_expires: float | None = None
    state_since: float | None = None
    unhealthy_since: float | None = None
    placement: int = 0
    running_seconds: float = 0.0
    capacity_misses: int = 0  # capacity misses in a row (stockouts, queue timeouts) since READY
    flaps: int = 0  # preemptions in a row of attempts that ran under requeue.min_run_seconds
    bad_hosts: int = 0  # attempts ended bad_host (requeue.max_bad_hosts)
    hangs: int = 0  # attempts ended hung (requeue.max_hangs)
    owner: str | None = None  # who submitted it (tpujob/owners.py); None: before owners were kept
    from_node: str | None = None  # the node it was submitted from (its hostname)
    priority: str = "normal"  # the spec's band: high | normal | low (docs/scheduler.md)
    waiting_for: str | None = None  # QUEUED: why, in words (reconcile/admission.py)
    evictions: int = 0  # attempts ended evicted for a higher band (never a preemption or failure)


class Attempt(SQLModel, table=True):
    id: int = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    number: int
    slice_name: str
    zone: str
    accelerator: str
    queued: bool
    started_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    last_step: int | None = None
    resumed_from_step: int | None = None
    host_keys: str | None = None  # JSON {host index: [OpenSSH public key lines]}
    cause: str | None = None  # why it ended, in words: the message of the move that ended it
    total_steps: int | None = None  # the heartbeat's total, where the program says it
    progress: str | None = None  # JSON [[time, step], ...] of the last minutes (tpujob/progress.py)
    create_operation: str | None = None  # the node create's operation, while it may still say why
    slices: int = 1  # multislice: the attempt's nodes are SLICE_NAME-0 .. -(slices-1)
    lost_slices: str | None = None  # multislice: the slices it ended on losing, "1" or "0,1"
    # Elastic multislice: its nodes when not NAME-0..N-1 (space-separated: the slices kept from
    # the attempt before, then those grown for it), and the nodes being created to grow it back
    # (JSON {node: create operation}, plus "failed_at" once a try failed).
    nodes: str | None = None
    growing: str | None = None
    host_user: str | None = None  # who the program runs as on the hosts (None: before migration 18)
    # What the bundled runtime measured of it (JSON of milliseconds: compile_ms, restore_ms,
    # checkpoint_ms, step_ms, save_ms; service/ledger.Reported reads it). None: nothing reported.
    reported: str | None = None


class LabNode(SQLModel, table=True):
    """A node of the lab (Store.register_node): a $TPUJOB_HOME sharing this store, by its public key."""
    __tablename__ = "lab_node"
    public_key: str = Field(primary_key=True)
    name: str
    account: str | None = None
    registered_at: float
    last_seen: float


class Event(SQLModel, table=True):
    id: int = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    at: float
    kind: str
    message: str
    from_state: str | None = None
    to_state: str | None = None


class Outbox(SQLModel, table=True):
    """A notification to send (store/outbox.py): pending, then sent or gave_up."""
    id: int = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    event_id: int
    channel: int  # index into the spec's notify list
    kind: str  # succeeded | failed | preempted | nan | cancelled | test
    text: str
    status: str = Field(index=True)
    created_at: float
    next_try: float
    attempts: int = 0
    last_error: str | None = None
    claimed_by: str | None = None
    claim_expires: float | None = None
    sent_at: float | None = None


class SetupCache(SQLModel, table=True):
    """The sha256 of a setup cache archive, as host 0 reported it when it stored it (migration
    16): a later host unpacks the archive only if it still has this digest."""
    __tablename__ = "setup_cache"
    bucket: str = Field(primary_key=True)
    cache_key: str = Field(primary_key=True)
    sha256: str
    recorded_at: float


class Quota(SQLModel, table=True):
    """A lab's cap on chips held at once (migration 19, `tpujob quota set`): per TPU family,
    and optionally per region and provisioning ("" stands for any)."""
    family: str = Field(primary_key=True)
    region: str = Field(primary_key=True)
    provisioning: str = Field(primary_key=True)
    chips: int
    set_at: float


class Budget(SQLModel, table=True):
    """A user's spending cap per period (migration 19, `tpujob budget set`), in dollars at the
    prices tpujob shows; the period is a UTC day, week (from Monday) or month."""
    owner: str = Field(primary_key=True)
    dollars: float
    period: str


class ShareWeight(SQLModel, table=True):
    """A user's fair-share weight (migration 19, `tpujob quota weight`); 1 when absent."""
    __tablename__ = "share_weight"
    owner: str = Field(primary_key=True)
    weight: float
