"""The job spec's models: what a spec may say, field by field (pydantic, strict, frozen), and the
resolved spec the store keeps (`ResolvedSpec`). Field-local rules live here; the rules that need
the catalogue or the settings are resolve.py's."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tpujob.catalogue import TPU_VM, Api
from tpujob.compute_shapes import BOOT_DISK_GB

JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?\Z")
RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")  # GCE disk/snapshot names
BUCKET_NAME = re.compile(r"^[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# A zone like us-central2-b, or an AI zone like us-central1-ai1a (TPU7x: Google's TPU regions
# and zones page, https://cloud.google.com/tpu/docs/regions-zones).
ZONE_NAME = re.compile(r"^[a-z]+-[a-z]+[0-9]+-(?:[a-z]|ai[0-9]+[a-z])\Z")
PROVISIONING = ("spot", "on-demand", "preemptible", "flex-start", "reservation")
# tpu.max_run_duration: seconds, or a duration like 24h, 90m, 1d12h.
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")


def duration_seconds(value: Any) -> int:
    """A duration as whole seconds: a number of seconds, or text like `24h`, `90m`, `1d12h`,
    `3600s`. Raises ValueError for anything else, zero included."""
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds or a duration like 24h")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value.strip().isdigit():
        seconds = int(value.strip())
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value.strip())) and any(m.groups()):
        d, h, mi, se = (int(g or 0) for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + se
    else:
        raise ValueError("must be a number of seconds or a duration like 24h, 90m or 1d12h")
    if seconds <= 0:
        raise ValueError("must be longer than 0 seconds")
    return seconds
# Network and subnetwork as the Compute API takes them (compute.v1 discovery document,
# NetworkInterface.network/subnetwork): a name, or a full or partial URL of the resource.
# Tags: compute.v1 Tags.items, "1-63 characters long, and comply with RFC1035".
_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]"
_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_COMPUTE_URL = r"(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
NETWORK_REF = re.compile(rf"^(?:{_NAME}|{_COMPUTE_URL}(?:projects/{_PROJECT}/)?global/networks/{_NAME})\Z")
SUBNETWORK_REF = re.compile(rf"^(?:{_NAME}|{_COMPUTE_URL}(?:projects/{_PROJECT}/)?"
                            rf"regions/(?P<region>[a-z]+-[a-z]+[0-9]+)/subnetworks/{_NAME})\Z")
NETWORK_TAG = re.compile(rf"^{_NAME}\Z")


class _Model(BaseModel):
    # strict: YAML's `true` is not the number 1, nor `"5"` a count.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Fallback(_Model):
    accelerator: str | None = Field(default=None, description=(
        "The accelerator type of this placement; unset: the primary's."))
    zone: str | None = Field(default=None, description="The zone of this placement; unset: the primary's.")


class NetworkSpec(_Model):
    """The node's networkConfig and tags (tpu.v2 Node.networkConfig, Node.tags)."""
    # gcloud sends enableExternalIps = not --internal-ips: external addresses unless asked not to.
    external_ips: bool = Field(default=True, description=(
        "Give every host an external IP; false: internal addresses only, and tpujob must run "
        "inside the VPC (the subnetwork needs Private Google Access or Cloud NAT for GCS and PyPI)."))
    network: str | None = Field(default=None, description=(
        "The VPC network: a name or projects/P/global/networks/NAME; unset: Google's `default`."))
    subnetwork: str | None = Field(default=None, description=(
        "The subnetwork: a name or projects/P/regions/REGION/subnetworks/NAME, in the zone's region."))
    tags: list[str] = Field(default_factory=list, description=(
        "Network tags on the hosts: the targets of your firewall rules."))


class SliceRange(_Model):
    """An elastic multislice job: it runs on up to `max` slices, and on as few as `min` while
    the others are lost (docs/multislice.md)."""
    min: int = Field(ge=1, description="The fewest slices the job trains on while others are lost.")
    max: int = Field(ge=2, description="The slices an attempt asks for, and grows back to.")

    @model_validator(mode="after")
    def _min_up_to_max(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class TpuSpec(_Model):
    accelerator: str = Field(description=(
        "The accelerator type: v2-N, v3-N, v4-N, v5p-N, tpu7x-N (N TensorCores), v5litepod-N, "
        "v6e-N (N chips)."))
    zone: str | None = Field(default=None, description=(
        "The zone the slice is made in; unset: `tpujob config set zone`."))
    project: str | None = Field(default=None, description=(
        "The Google Cloud project; unset: `tpujob config set project`, else (gcp) the project of "
        "Application Default Credentials."))
    runtime_version: str | None = Field(default=None, description=(
        "The TPU VM image; unset: the generation's default (v4: tpu-ubuntu2204-base, v5e: "
        "v2-alpha-tpuv5-lite, ...). Not with api compute, whose VMs boot an image family."))
    # Which Google API makes the slice: the Cloud TPU API (nodes, queued resources), Compute
    # Engine (instances; a multi-host slice is a BULK MIG with a workload policy), or auto:
    # compute for generations the TPU API does not serve (TPU7x), tpu-vm otherwise.
    api: Literal["auto", Api] = Field(default="auto", description=(
        "Which Google API makes the slice: tpu-vm (the Cloud TPU API), compute (Compute Engine "
        "VMs: v5p, v6e, tpu7x; docs/compute-engine.md), or auto: compute for TPU7x, tpu-vm "
        "otherwise."))
    # flex-start and reservation: Compute Engine only (api: compute).
    provisioning: Literal["spot", "on-demand", "preemptible", "flex-start", "reservation"] = Field(
        default="spot", description=(
            "How the capacity is obtained: spot, on-demand, preemptible (legacy, cannot be queued; "
            "not on compute), flex-start or reservation (both api compute only). Compute Engine "
            "with several VMs takes flex-start or reservation only (Google's bulk mode)."))
    reservation: str | None = Field(default=None, description=(
        "The reservation a `provisioning: reservation` job consumes (required there, refused "
        "elsewhere): NAME or projects/P/reservations/NAME, optionally /reservationBlocks/BLOCK."))
    # Compute Engine's scheduling.maxRunDuration, whole seconds (a duration like 24h is read as
    # seconds): required for flex-start (at most 7 days).
    max_run_duration: int | None = Field(default=None, description=(
        "api compute only: how long the VMs may run, in seconds or like 90m, 24h, 1d12h; "
        "required for flex-start (at most 7d). Compute Engine ends the VMs when it runs out."))
    # Compute Engine only: the boot disk's size in GB (initializeParams.diskSizeGb). Unset, the
    # VMs boot with BOOT_DISK_GB; Google's own default is the image's size, small for JAX and a
    # user's packages (tpujob.compute_shapes.BOOT_DISK_GB).
    boot_disk_gb: int | None = Field(default=None, ge=10, le=65536, description=(
        f"api compute only: the VMs' boot disk in GB; unset: {BOOT_DISK_GB}."))
    # Through a queued resource (TPU API). True by default on the TPU API path; the Compute
    # Engine path has no queued resources, so resolve() makes an unset one false there.
    queued: bool = Field(default=True, description=(
        "Create the slice through a queued resource (keeps a place in Google's queue), else "
        "directly. api compute: false (queued resources are the TPU API's)."))
    # Multislice: this many slices of `accelerator`, one job over DCN, or {min, max} for an
    # elastic job (docs/multislice.md).
    slices: int | SliceRange = Field(default=1, description=(
        "Multislice: N slices over DCN as one job, or {min: M, max: N} for an elastic job that "
        "trains on the slices left and grows back (docs/multislice.md); api compute: 1 only."))
    fallback: list[Fallback] = Field(default_factory=list, description=(
        "Placements tried in turn (then the primary again) when capacity is missing; a zone that "
        "does not offer the accelerator is passed over."))
    # The order the placements are tried in: as written (the primary, then each fallback), or
    # `auto`: by expected goodput per dollar from the store's history, decided at create
    # (reconcile/risk.py; ResolvedSpec.placement_order keeps the order chosen).
    placement: Literal["ordered", "auto"] = Field(default="ordered", description=(
        "The order the placements are tried in: ordered (as written), or auto: by expected goodput "
        "per dollar from the store's history, chosen at create (docs/goodput.md)."))
    network: NetworkSpec = Field(default_factory=NetworkSpec, description=(
        "The hosts' network: external IPs, VPC network, subnetwork, tags."))

    def placements(self, accelerator: str, zone: str) -> list[tuple[str, str]]:
        """[(accelerator, zone)] of the primary placement (given as resolved: the zone may come
        from settings), then each fallback, which keeps the primary's where it names none. The
        one list of a job's placements: the spec's checks, create's warnings, the index decide
        and the store keep (Job.placement), the sweep's choice (reconcile/placement.py)."""
        return [(accelerator, zone)] + [(fb.accelerator or accelerator, fb.zone or zone) for fb in self.fallback]

    @field_validator("max_run_duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else duration_seconds(value)

    @field_validator("slices", mode="before")
    @classmethod
    def _slice_range(cls, value: Any) -> Any:
        """A count, or a mapping for an elastic range: each with an error of its own (not the
        union's "should be a valid integer" for a range)."""
        if isinstance(value, dict):
            try:
                return SliceRange.model_validate(value)
            except ValidationError as err:
                raise ValueError("; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"]
                    else e["msg"].removeprefix("Value error, ")
                    for e in err.errors())) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be a number of slices or {min, max}")
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @property
    def max_slices(self) -> int:
        """The slices an attempt asks for (all of an elastic job's)."""
        return self.slices.max if isinstance(self.slices, SliceRange) else self.slices

    @property
    def min_slices(self) -> int:
        """The fewest slices an attempt trains on: max_slices unless elastic."""
        return self.slices.min if isinstance(self.slices, SliceRange) else self.slices

    @property
    def elastic(self) -> bool:
        return self.min_slices < self.max_slices


class DiskSpec(_Model):
    # A clone's cloud name is NAME-STORETAG-JOBID (one clone per job; names.clone_name).
    name: str = Field(description=(
        "The disk's name: with snapshot or source_disk, the job's own clone is made as "
        "NAME-TAG-JOBID and reused by every attempt; alone, that disk in the zone (a read-write one "
        "is made, empty, when missing)."))
    source_disk: str | None = Field(default=None, description=(
        "A master disk to snapshot now and clone for this job."))
    snapshot: str | None = Field(default=None, description="A snapshot to clone for this job.")
    mode: Literal["read-only", "read-write"] = Field(default="read-only", description=(
        "read-only or read-write (read-write only on a single-host slice)."))
    mount: str = Field(description="Where the disk is mounted on every host (an absolute path).")
    type: str | None = Field(default=None, description=(
        "The disk type; unset: the generation's default (pd-balanced; v6e and tpu7x hyperdisk-ml)."))
    size_gb: int | None = Field(default=None, gt=0, le=65536, description=(
        "The disk's size in GB; unset: the snapshot's (a new disk: Google's default)."))
    keep: bool = Field(default=False, description="Keep the clone when the job is deleted.")


class BucketSpec(_Model):
    bucket: str = Field(description="The Cloud Storage bucket mounted with gcsfuse on every host.")
    mount: str = Field(description="Where the bucket is mounted on every host (an absolute path).")
    read_only: bool = Field(default=False, description="Mount it read-only.")
    # gcsfuse's default; 0 for checkpoint directories that must be strongly consistent.
    metadata_ttl_secs: int = Field(default=60, ge=-1, description=(
        "gcsfuse's metadata cache in seconds: 0 strongly consistent (checkpoints), -1 forever."))
    only_dir: str | None = Field(default=None, description=(
        "Mount only this directory of the bucket (relative, no `..`)."))
    # gcsfuse's file cache (v2 flags --cache-dir, --file-cache-max-size-mb): repeated reads of
    # the same data (epochs) come from local disk. Off unless cache_dir is given; -1 = no limit.
    cache_dir: str | None = Field(default=None, description=(
        "gcsfuse's file cache on the host's disk (an absolute path), so re-read data (epochs) "
        "comes from local disk; off without it."))
    file_cache_max_size_mb: int | None = Field(default=None, ge=-1, description=(
        "The file cache's size in MB (needs cache_dir); -1 or unset: as much as the disk holds."))

    @field_validator("cache_dir")
    @classmethod
    def _absolute_cache_dir(cls, value):
        if value is not None and (not value.startswith("/") or ".." in value.split("/")):
            raise ValueError("cache_dir must be an absolute path on the hosts, e.g. /tmp/gcsfuse-cache")
        return value

    @model_validator(mode="after")
    def _cache_size_needs_dir(self):
        if self.file_cache_max_size_mb is not None and self.cache_dir is None:
            raise ValueError("file_cache_max_size_mb needs cache_dir (gcsfuse caches files there)")
        return self


class SetupSpec(_Model):
    """`setup: {run: ..., cache: [PATHS], key_files: [FILES]}`: the setup, and what it produces.
    The cache paths (on the hosts; relative ones from the home) are packed once after a
    successful setup on host 0 and unpacked instead of running it by every later host and attempt
    whose key (the setup, the key files' contents, the runtime version, the generation) is the
    same (tpujob.attempt.setup_cache)."""
    run: str = Field(description="The setup's shell, run on every host whose cache misses.")
    cache: list[str] = Field(default_factory=list, description=(
        "Paths on the hosts (relative: from the home) packed after a successful setup and "
        "unpacked instead of running it; kept in run_dir's bucket (docs/hosts.md)."))
    key_files: list[str] = Field(default_factory=list, description=(
        "Files in the sync directory whose contents are part of the cache's key (an edit makes a "
        "new key, as do run, the runtime version and the generation)."))


class RunSpec(_Model):
    command: str | None = Field(default=None, description=(
        "Your program, started on every host (shell); give command or runtime, not both."))
    runtime: dict[str, Any] | None = Field(default=None, description=(
        "The bundled JAX training runtime's config instead of a command (docs/runtime.md)."))
    workdir: str | None = Field(default=None, description=(
        "Where the program starts on the hosts (~/ and relative: the SSH user's home); unset: "
        "the synced directory, else the home."))
    # Off by default: many programs are silent for long stretches.
    hang_seconds: float | None = Field(default=None, gt=0, le=7 * 86400, description=(
        "A program that writes no heartbeat is hung once no host's log has grown for this long; "
        "unset: never."))


_WEEK = 7 * 86400


class RequeuePolicy(_Model):
    max_preemptions: int = Field(default=20, ge=0, description=(
        "New slices after preemptions before FAILED preemption_budget."))
    max_failures: int = Field(default=0, ge=0, description=(
        "Re-runs after a non-zero exit before FAILED user_error."))
    max_nan: int = Field(default=3, ge=0, description=(
        "New slices after a NaN exit (exit 76) before FAILED nan_budget."))
    max_hangs: int = Field(default=3, ge=0, description=(
        "New slices after a hang (stacks kept) before FAILED hang_budget."))
    # With the backoff capped at 30 min, 48 misses are about a day of trying.
    max_capacity_retries: int = Field(default=48, ge=0, description=(
        "Capacity misses in a row (stockout, queue or provision timeout) before FAILED no_capacity."))
    backoff_seconds: float = Field(default=30.0, ge=0, le=86400, description=(
        "The wait before the next attempt after a capacity miss, a failure or a flap, doubled per "
        "one in a row (at most 30 min, plus jitter); never after a plain preemption."))
    # A preemption restarts at once, unless the attempt ran less than this.
    min_run_seconds: float = Field(default=600.0, ge=0, le=_WEEK, description=(
        "A preemption after a shorter run is a flap: the next attempt waits backoff_seconds."))
    queue_timeout_seconds: float = Field(default=6 * 3600.0, gt=0, le=_WEEK, description=(
        "A queued resource waiting longer moves on to the next placement."))
    provision_timeout_seconds: float = Field(default=30 * 60.0, gt=0, le=_WEEK, description=(
        "A slice CREATING longer counts as a capacity miss."))
    setup_timeout_seconds: float = Field(default=15 * 60.0, gt=0, le=_WEEK, description=(
        "Host setup's limit (scaled by host count) before the attempt fails setup_failed."))
    unhealthy_grace_seconds: float = Field(default=120.0, ge=0, le=_WEEK, description=(
        "An unreachable host (in setup or running) or a missing program is re-checked this long "
        "before the slice is called lost."))
    # A stuck collective or a dead coordinator, not a slow step: the runtime rewrites it at
    # least every 30 s.
    heartbeat_timeout_seconds: float = Field(default=300.0, gt=0, le=_WEEK, description=(
        "A run-dir heartbeat (or its training step) older than this is a hung program; keep it "
        "above the program's heartbeat interval."))
    # The sweep's interval (cron's default is 5 min), so the next sweep is not too late.
    maintenance_lead_seconds: float = Field(default=300.0, ge=0, le=_WEEK, description=(
        "Google's maintenance starting sooner than this is acted on now: checkpoint, new slice "
        "(counted as a preemption)."))
    # Not the program's fault, so not its failures; but a zone that keeps handing out bad hosts
    # should stop the job, not loop through slices forever.
    max_bad_hosts: int = Field(default=3, ge=0, description=(
        "New slices after a bad host (its TPU held by another process) before FAILED bad_host_budget."))


# What a notification channel may be told about (docs/notify.md): each maps to a state move.
NOTIFY_ON = ("succeeded", "failed", "preempted", "nan", "cancelled")
NotifyOn = Literal["succeeded", "failed", "preempted", "nan", "cancelled"]
_DEFAULT_ON: list[NotifyOn] = ["succeeded", "failed"]
# `${NAME}`: the webhook URL is the secret NAME's value (environment, else secrets.env), so a
# Slack URL never reaches the store; a literal URL is kept, and masked wherever it is shown.
WEBHOOK_SECRET = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}\Z")
EMAIL_ADDRESS = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+\.[^@\s<>,;.]+\Z")


class NotifySpec(_Model):
    webhook: str | None = Field(default=None, description=(
        "A Slack-compatible webhook: ${NAME} (a secret's value, never stored) or an http(s) URL "
        "(masked when shown). Give webhook or email."))
    email: str | None = Field(default=None, description=(
        "An address, told through the SMTP server in `tpujob config` (smtp_*)."))
    on: list[NotifyOn] = Field(default_factory=lambda: _DEFAULT_ON.copy(), description=(
        "What this channel is told about, of succeeded, failed, preempted, nan, cancelled."))


class JobSpec(_Model):
    name: str = Field(description="The job's name: lowercase letters, digits, hyphens; at most 40 characters.")
    tpu: TpuSpec = Field(description="The slice: accelerator, zone, how it is obtained, fallbacks.")
    disks: list[DiskSpec] = Field(default_factory=list, description=(
        "Persistent disks on every host (clone and scale: docs/storage.md)."))
    buckets: list[BucketSpec] = Field(default_factory=list, description=(
        "Cloud Storage buckets mounted with gcsfuse on every host."))
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables set on every host.")
    secrets: list[str] = Field(default_factory=list, description=(
        "Names of secrets forwarded to every host, from your environment, else "
        "$TPUJOB_HOME/secrets.env; never stored."))
    setup: str | SetupSpec | None = Field(default=None, description=(
        "Shell run once per attempt on every host before the program, or {run, cache, key_files} "
        "to set up once and unpack it on every later host and attempt (docs/hosts.md)."))
    sync: str | None = Field(default=None, description=(
        "A local directory uploaded to every host before setup (.gitignore honoured)."))
    run: RunSpec = Field(description="What runs on every host: command or runtime.")
    run_dir: str | None = Field(default=None, description=(
        "gs://BUCKET/PREFIX: the job's run dir is PREFIX/JOBID there (heartbeat, status.json, "
        "checkpoints)."))
    requeue: RequeuePolicy = Field(default_factory=RequeuePolicy, description=(
        "What happens after a preemption, a failure, a NaN loss or a capacity miss: the budgets "
        "and timeouts."))
    notify: list[NotifySpec] = Field(default_factory=list, description=(
        "Channels told after the job's moves, by the sweep, each message once (docs/notify.md)."))
    # A high job waiting for quota evicts low ones.
    priority: Literal["high", "normal", "low"] = Field(default="normal", description=(
        "The job's band in a lab's scheduler under `tpujob quota`: high, normal or low "
        "(docs/scheduler.md)."))
    # Reached, it is stopped with a checkpoint and never starts another attempt.
    max_cost: float | None = Field(default=None, gt=0, description=(
        "Dollars the job may spend at its price per hour: reached, it stops with a checkpoint "
        "and ends FAILED budget."))

    @property
    def setup_command(self) -> str:
        """The setup as the hosts run it, in the short form or the long one ("" for none)."""
        return (self.setup.run if isinstance(self.setup, SetupSpec) else self.setup) or ""

    @property
    def setup_cache(self) -> SetupSpec | None:
        """The long form when it names paths to cache; None: setup runs on every host as written."""
        return self.setup if isinstance(self.setup, SetupSpec) and self.setup.cache else None

    @field_validator("notify", mode="before")
    @classmethod
    def _on_is_a_key(cls, value):
        # YAML 1.1 (PyYAML) reads the key `on` as the boolean true.
        if isinstance(value, list):
            return [{("on" if k is True else k): v for k, v in item.items()} if isinstance(item, dict) else item
                    for item in value]
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _scalars_as_strings(cls, value):
        # YAML reads `STEPS: 100` as an int; environment values are strings.
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v))
                    if isinstance(v, (int, float, bool)) else v for k, v in value.items()}
        return value


class ComputePlacement(BaseModel):
    """What the slice is on Compute Engine (tpujob.compute_shapes.compute_shape): one instance, or a
    BULK MIG of `hosts` VMs under a workload policy with `topology`."""

    model_config = ConfigDict(frozen=True)

    machine_type: str
    hosts: int
    chips_per_host: int
    topology: str
    boot_disk_type: str
    image_family: str
    image_project: str
    boot_disk_gb: int = BOOT_DISK_GB  # a placement stored before the field: tpujob's default

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


class ResolvedSpec(BaseModel):
    """The spec with every default decided: what `validate` prints and the store keeps."""

    model_config = ConfigDict(frozen=True)

    spec: JobSpec
    accelerator: str
    generation: str
    hosts: int  # per slice
    chips: int  # per slice
    cores: int
    slices: int = 1  # an attempt's (an elastic job's max)
    min_slices: int = 1  # an elastic job's fewest; slices otherwise
    zone: str
    project: str
    runtime_version: str
    disk_types: dict[str, str]
    # Every slice's together, at the spec's provisioning; None: no published price.
    cost_per_hour_usd: float | None
    on_demand_cost_per_hour_usd: float | None = None  # the list price, for comparison
    sync_path: str | None
    # What the cloud layer builds its request from. A spec recorded before these existed was a
    # TPU API one: api tpu-vm, its spec's provisioning, no reservation or run limit.
    api: Api = TPU_VM
    provisioning: str = ""  # the spec's (filled in from it when missing)
    reservation: str | None = None
    max_run_duration_seconds: int | None = None
    compute: ComputePlacement | None = None  # api compute only
    # `placement: auto`: the spec's placements (indexes into TpuSpec.placements) in the order
    # create chose from the store's history; None: as written.
    placement_order: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _provisioning_from_the_spec(self):
        if not self.provisioning:
            object.__setattr__(self, "provisioning", self.spec.tpu.provisioning)
        return self

    def placements(self) -> list[tuple[str, str]]:
        """The job's placements, the primary first (TpuSpec.placements), in the order
        `placement: auto` chose where it did."""
        written = self.spec.tpu.placements(self.accelerator, self.zone)
        if self.placement_order is None or sorted(self.placement_order) != list(range(len(written))):
            return written
        return [written[i] for i in self.placement_order]

    def to_json_dict(self) -> dict:
        """What the store keeps (a literal webhook URL included: the sweep sends to it)."""
        data = self.model_dump(mode="json")
        return data

    def public_dict(self) -> dict:
        """What is shown (`validate --json`): webhook URLs masked."""
        data = self.to_json_dict()
        for channel in data["spec"]["notify"]:
            if channel.get("webhook"):
                channel["webhook"] = mask_webhook(channel["webhook"])
        return data


def mask_webhook(url: str) -> str:
    """A webhook URL as shown anywhere (show, events, --json, errors): scheme and host only, as
    the path of a Slack-style URL is its secret. A `${NAME}` reference is shown as written."""
    if WEBHOOK_SECRET.fullmatch(url):
        return url
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "***"
    return f"{parts.scheme}://{host}{port}/***" if parts.scheme and host else "***"
