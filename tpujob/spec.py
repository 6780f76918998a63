"""The job spec: YAML -> a typed, validated model, resolved against the TPU catalogue.

Every refusal is one SpecError naming the field (and its YAML line), raised before anything is
written or spent.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tpujob.catalogue import Accelerator, accelerator
from tpujob.errors import SpecError
from tpujob.names import RUN_DIR_MOUNT  # where the run dir's bucket is mounted: no spec mount may take it

JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # GCE disk/snapshot names
BUCKET_NAME = re.compile(r"^[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ZONE_NAME = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
PROVISIONING = ("spot", "on-demand", "preemptible")
# Network and subnetwork as the Compute API takes them (compute.v1 discovery document,
# NetworkInterface.network/subnetwork): a name, or a full or partial URL of the resource.
# Tags: compute.v1 Tags.items, "1-63 characters long, and comply with RFC1035".
_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]"
_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_COMPUTE_URL = r"(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
NETWORK_REF = re.compile(rf"^(?:{_NAME}|{_COMPUTE_URL}(?:projects/{_PROJECT}/)?global/networks/{_NAME})$")
SUBNETWORK_REF = re.compile(rf"^(?:{_NAME}|{_COMPUTE_URL}(?:projects/{_PROJECT}/)?"
                            rf"regions/(?P<region>[a-z]+-[a-z]+[0-9]+)/subnetworks/{_NAME})$")
NETWORK_TAG = re.compile(rf"^{_NAME}$")


class _Model(BaseModel):
    # strict: YAML's `true` is not the number 1, nor `"5"` a count.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Fallback(_Model):
    accelerator: Optional[str] = None
    zone: Optional[str] = None


class NetworkSpec(_Model):
    """The node's networkConfig and tags (tpu.v2 Node.networkConfig, Node.tags)."""
    # gcloud sends enableExternalIps = not --internal-ips: external addresses unless asked not to.
    external_ips: bool = True
    network: Optional[str] = None  # a name or a resource path; None: Google's "default"
    subnetwork: Optional[str] = None
    tags: list[str] = Field(default_factory=list)  # firewall targets


class TpuSpec(_Model):
    accelerator: str
    zone: Optional[str] = None
    project: Optional[str] = None
    runtime_version: Optional[str] = None
    provisioning: Literal["spot", "on-demand", "preemptible"] = "spot"
    queued: bool = True
    fallback: list[Fallback] = Field(default_factory=list)
    network: NetworkSpec = Field(default_factory=NetworkSpec)


class DiskSpec(_Model):
    name: str  # a clone's cloud name is NAME-JOBID (one clone per job)
    source_disk: Optional[str] = None  # snapshot this master now, then clone
    snapshot: Optional[str] = None  # clone from this snapshot
    mode: Literal["read-only", "read-write"] = "read-only"
    mount: str
    type: Optional[str] = None
    size_gb: Optional[int] = Field(default=None, gt=0, le=65536)
    keep: bool = False

    @model_validator(mode="after")
    def _room_for_the_job_id(self):
        if (self.source_disk or self.snapshot) and len(self.name) > 56:
            raise ValueError(f"a clone's name may have at most 56 characters: the clone is named "
                             f"{self.name}-JOBID, and disk names have at most 63")
        return self


class BucketSpec(_Model):
    bucket: str
    mount: str
    read_only: bool = False
    # gcsfuse's default; 0 for checkpoint directories that must be strongly consistent.
    metadata_ttl_secs: int = Field(default=60, ge=-1)
    only_dir: Optional[str] = None
    # gcsfuse's file cache (v2 flags --cache-dir, --file-cache-max-size-mb): repeated reads of
    # the same data (epochs) come from local disk. Off unless cache_dir is given; -1 = no limit.
    cache_dir: Optional[str] = None
    file_cache_max_size_mb: Optional[int] = Field(default=None, ge=-1)

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


class RunSpec(_Model):
    command: Optional[str] = None
    runtime: Optional[dict[str, Any]] = None
    workdir: Optional[str] = None


_WEEK = 7 * 86400


class RequeuePolicy(_Model):
    max_preemptions: int = Field(default=20, ge=0)
    max_failures: int = Field(default=0, ge=0)
    max_nan: int = Field(default=3, ge=0)
    # Capacity misses (stockout, queue timeout, stuck provisioning) in a row before FAILED
    # no_capacity; with the backoff capped at 30 min, 48 misses are about a day of trying.
    max_capacity_retries: int = Field(default=48, ge=0)
    backoff_seconds: float = Field(default=30.0, ge=0, le=86400)
    # A preemption restarts at once, unless the attempt ran less than this: then it is a flap
    # and the next attempt waits backoff_seconds, doubled per flap in a row.
    min_run_seconds: float = Field(default=600.0, ge=0, le=_WEEK)
    queue_timeout_seconds: float = Field(default=6 * 3600.0, gt=0, le=_WEEK)
    provision_timeout_seconds: float = Field(default=30 * 60.0, gt=0, le=_WEEK)
    setup_timeout_seconds: float = Field(default=15 * 60.0, gt=0, le=_WEEK)
    unhealthy_grace_seconds: float = Field(default=120.0, ge=0, le=_WEEK)
    # A heartbeat in the run dir older than this is a hung program (a stuck collective, a dead
    # coordinator), not a slow step: the runtime rewrites it at least every 30 s.
    heartbeat_timeout_seconds: float = Field(default=300.0, gt=0, le=_WEEK)


# What a notification channel may be told about (docs/notify.md): each maps to a state move.
NOTIFY_ON = ("succeeded", "failed", "preempted", "nan", "cancelled")
NotifyOn = Literal["succeeded", "failed", "preempted", "nan", "cancelled"]
# `${NAME}`: the webhook URL is the secret NAME's value (environment, else secrets.env), so a
# Slack URL never reaches the store; a literal URL is kept, and masked wherever it is shown.
WEBHOOK_SECRET = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
EMAIL_ADDRESS = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+\.[^@\s<>,;.]+$")


class NotifySpec(_Model):
    webhook: Optional[str] = None
    email: Optional[str] = None
    on: list[NotifyOn] = Field(default_factory=lambda: ["succeeded", "failed"])


class JobSpec(_Model):
    name: str
    tpu: TpuSpec
    disks: list[DiskSpec] = Field(default_factory=list)
    buckets: list[BucketSpec] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    secrets: list[str] = Field(default_factory=list)
    setup: Optional[str] = None
    sync: Optional[str] = None
    run: RunSpec
    run_dir: Optional[str] = None
    requeue: RequeuePolicy = Field(default_factory=RequeuePolicy)
    notify: list[NotifySpec] = Field(default_factory=list)

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


class ResolvedSpec(BaseModel):
    """The spec with every default decided: what `validate` prints and the store keeps."""

    model_config = ConfigDict(frozen=True)

    spec: JobSpec
    accelerator: str
    generation: str
    hosts: int
    chips: int
    cores: int
    zone: str
    project: str
    runtime_version: str
    disk_types: dict[str, str]
    cost_per_hour_usd: Optional[float]  # at the spec's provisioning; None: no published price
    on_demand_cost_per_hour_usd: Optional[float] = None  # the list price, for comparison
    sync_path: Optional[str]

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
    if WEBHOOK_SECRET.match(url):
        return url
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "***"
    return f"{parts.scheme}://{host}{port}/***" if parts.scheme and host else "***"


# --- parsing ----------------------------------------------------------------------------------

def _line_index(node, path=(), out=None) -> dict[tuple, int]:
    """Map each key path of a composed YAML document to its 1-based line."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = path + (key.value,)
            if child in out:
                # PyYAML keeps the last of two equal keys silently; a spec must not.
                raise SpecError("key given twice", field=_dotted(child), line=key.start_mark.line + 1)
            out[child] = key.start_mark.line + 1
            _line_index(value, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (i,)] = item.start_mark.line + 1
            _line_index(item, path + (i,), out)
    return out


def _dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _model_at(path: tuple) -> type[BaseModel] | None:
    model: Any = JobSpec
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        inner = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if inner is None:
            for a in args:
                for b in getattr(a, "__args__", ()):
                    if isinstance(b, type) and issubclass(b, BaseModel):
                        inner = b
        model = inner
    return model


def _first_error(exc: ValidationError, lines: dict[tuple, int]) -> SpecError:
    errors = exc.errors()
    # An unknown key usually explains a "missing" one next to it (a typo): report it first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        known = list(parent.model_fields) if parent else []
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else (f" (known: {', '.join(known)})" if known else "")
        message = f"unknown key{hint}"
    elif kind == "missing":
        message = "required key is missing"
    else:
        # A validator's own message, without pydantic's "Value error, " in front of it.
        msg = err["msg"].removeprefix("Value error, ")
        message = msg[0].lower() + msg[1:]
        if "input" in err and not isinstance(err["input"], (dict, list)):
            message += f" (got {err['input']!r})"
    line = lines.get(loc) or lines.get(loc[:-1])
    return SpecError(message, field=_dotted(loc), line=line)


def parse(text: str, source: str = "<spec>") -> tuple[JobSpec, dict[tuple, int]]:
    """Parse YAML text into a JobSpec (structure and types only; see `resolve` for the rules)."""
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise SpecError(f"{source}: invalid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a job spec is a YAML mapping with at least name, tpu and run")
    lines = _line_index(node)
    try:
        return JobSpec.model_validate(data), lines
    except ValidationError as exc:
        raise _first_error(exc, lines) from None


# --- the rules that need the catalogue and the settings -----------------------------------------

def _fail(message: str, path: tuple, lines: dict[tuple, int]) -> SpecError:
    return SpecError(message, field=_dotted(path), line=lines.get(path))


# Mounting at one of these, or above one (`/`), would hide what the host needs to boot, log in
# or run the program (the interpreter, home, /tmp's libtpu lockfile).
SYSTEM_DIRS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr",
    "/var",
})
# Not even below these: kernel and boot filesystems, and the system's own programs.
NO_MOUNTS_INSIDE = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                    "/proc", "/run", "/sbin", "/sys", "/usr")


def _inside(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip("/") + "/")


def _check_mount(path: str, where: tuple, seen: dict[str, tuple], lines) -> None:
    if not path.startswith("/"):
        raise _fail(f"mount path must be absolute, not {path!r}", where, lines)
    # normpath keeps a leading '//' (POSIX leaves it implementation-defined); Linux reads it as '/'.
    norm = "/" + posixpath.normpath(path).lstrip("/")
    if norm == "/" or ".." in path.split("/"):
        raise _fail(f"mount path {path!r} is not a usable directory", where, lines)
    covered = sorted(d for d in SYSTEM_DIRS if d == norm or _inside(d, norm))
    if covered:
        raise _fail(f"mount path {norm!r} would hide the system directory {covered[0]}; "
                    "mount under /mnt/NAME (or a directory of your own)", where, lines)
    system = next((d for d in NO_MOUNTS_INSIDE if _inside(norm, d)), None)
    if system:
        raise _fail(f"mount path {norm!r} is inside the system directory {system}; "
                    "mount under /mnt/NAME", where, lines)
    if norm == RUN_DIR_MOUNT or _inside(norm, RUN_DIR_MOUNT) or _inside(RUN_DIR_MOUNT, norm):
        raise _fail(f"mount path {norm!r} collides with {RUN_DIR_MOUNT}, where tpujob mounts "
                    "the run dir's bucket", where, lines)
    if norm in seen:
        raise _fail(f"mount path {norm!r} is already used by {_dotted(seen[norm])}", where, lines)
    # Nested mounts depend on their order and break on a read-only parent (no mount point can
    # be made on it); one would also hide the other's files on an unmount/remount.
    for other, other_where in seen.items():
        if _inside(norm, other):
            raise _fail(f"mount path {norm!r} is nested inside {_dotted(other_where)} ({other!r}); "
                        "give every disk and bucket a directory of its own", where, lines)
        if _inside(other, norm):
            raise _fail(f"mount path {norm!r} would contain {_dotted(other_where)} ({other!r}); "
                        "give every disk and bucket a directory of its own", where, lines)
    seen[norm] = where


def _check_only_dir(only_dir: str | None, where: tuple, lines) -> None:
    """gcsfuse --only-dir is a prefix inside the bucket: relative, and never climbing out."""
    if only_dir is None:
        return
    if only_dir.startswith("/") or ".." in only_dir.split("/") or not only_dir.strip("/"):
        raise _fail(f"only_dir must be a directory inside the bucket like 'data/train', not "
                    f"{only_dir!r} (no leading '/', no '..')", where, lines)


def _check_disks(spec: JobSpec, acc: Accelerator, lines, where: str,
                 chosen: dict[str, str] | None = None) -> dict[str, str]:
    """Each disk's type on `acc`. `chosen`: the types already resolved on the primary placement,
    which every attempt uses (one clone per job), so a fallback is checked against those, not
    against its own generation's default."""
    types = {}
    gen = acc.generation
    for i, disk in enumerate(spec.disks):
        base = ("disks", i)
        disk_type = (chosen or {}).get(disk.name) or disk.type or gen.default_disk_type
        if disk_type not in gen.disk_types:
            raise _fail(f"disk {disk.name}: type {disk_type!r} is not allowed on {gen.alias} "
                        f"({where}), which takes {' or '.join(gen.disk_types)}", base + ("type",), lines)
        if disk.mode == "read-write" and acc.multi_host:
            raise _fail(f"a read-write disk cannot be attached to {acc.name} ({acc.hosts} hosts, {where}): "
                        "multi-host slices attach disks read-only; clone it (snapshot + clone) and "
                        "mount the clone read-only", base + ("mode",), lines)
        types[disk.name] = disk_type
    return types


def _check_shared_run_dir(spec: JobSpec, acc: Accelerator, lines) -> None:
    """The runtime's hosts write one checkpoint together: with each host's run dir in its own
    home, Orbax waits forever at the first save for the other hosts' files."""
    if spec.run.runtime is not None and spec.run_dir is None and acc.multi_host:
        raise _fail(f"run.runtime on {acc.name} ({acc.hosts} hosts) needs a run dir shared by every "
                    "host: set run_dir: gs://BUCKET/PATH", ("run_dir",), lines)


def _check_network(net: NetworkSpec, zones: list[str], lines) -> None:
    base = ("tpu", "network")
    if net.network is not None and not NETWORK_REF.match(net.network):
        raise _fail(f"{net.network!r} is not a network: give its name (e.g. default) or its path "
                    "projects/PROJECT/global/networks/NAME", base + ("network",), lines)
    if net.subnetwork is not None:
        match = SUBNETWORK_REF.match(net.subnetwork)
        if not match:
            raise _fail(f"{net.subnetwork!r} is not a subnetwork: give its name or its path "
                        "projects/PROJECT/regions/REGION/subnetworks/NAME", base + ("subnetwork",), lines)
        # A subnetwork is regional: a node in a zone of another region cannot use it.
        elsewhere = [z for z in zones if match["region"] and not z.startswith(match["region"] + "-")]
        if elsewhere:
            raise _fail(f"subnetwork {net.subnetwork!r} is in region {match['region']}, but the job may "
                        f"run in zone {elsewhere[0]}", base + ("subnetwork",), lines)
    seen: set[str] = set()
    for i, tag in enumerate(net.tags):
        if not NETWORK_TAG.match(tag):
            raise _fail(f"{tag!r} is not a network tag: 1-63 lowercase letters, digits and hyphens, "
                        "starting with a letter and not ending with a hyphen", base + ("tags", i), lines)
        if tag in seen:
            raise _fail(f"tag {tag!r} is listed twice", base + ("tags", i), lines)
        seen.add(tag)


def _check_notify(channels: list[NotifySpec], lines) -> None:
    """Each channel is one webhook or one email address. No message quotes a webhook URL: it
    may be a secret."""
    from urllib.parse import urlsplit

    for i, channel in enumerate(channels):
        base = ("notify", i)
        if (channel.webhook is None) == (channel.email is None):
            raise _fail("a notify entry has exactly one of webhook and email", base, lines)
        if channel.webhook is not None and not WEBHOOK_SECRET.match(channel.webhook):
            try:
                parts = urlsplit(channel.webhook)
                host = parts.hostname
                parts.port  # noqa: B018 (raises on a port that is not a number)
            except ValueError:
                host, parts = None, None
            if parts is None or parts.scheme not in ("http", "https") or not host:
                raise _fail("webhook must be an http:// or https:// URL, or ${NAME} naming a secret "
                            "that holds one", base + ("webhook",), lines)
        if channel.email is not None and not EMAIL_ADDRESS.match(channel.email):
            raise _fail(f"{channel.email!r} is not an email address", base + ("email",), lines)
        if not channel.on:
            raise _fail(f"on lists nothing: give some of {', '.join(NOTIFY_ON)}", base + ("on",), lines)
        seen = set()
        for j, kind in enumerate(channel.on):
            if kind in seen:
                raise _fail(f"{kind!r} is listed twice", base + ("on", j), lines)
            seen.add(kind)


def webhook_secrets(spec: JobSpec) -> list[str]:
    """The secret names the spec's webhooks refer to (`${NAME}`)."""
    return [m.group(1) for c in spec.notify if c.webhook and (m := WEBHOOK_SECRET.match(c.webhook))]


def _hourly_cost(acc: Accelerator, provisioning: str) -> float | None:
    """The price per hour of the slice as provisioned: the on-demand list price, or the spot
    (preemptible) price. None where the catalogue has no published spot figure: the on-demand
    price is three times or more the spot one, so passing it off as the estimate misleads."""
    return acc.hourly_cost(spot=provisioning != "on-demand")


def resolve(spec: JobSpec, lines: dict[tuple, int] | None = None, *, default_zone: str = "",
            default_project: str = "", base_dir: Path | None = None) -> ResolvedSpec:
    lines = lines or {}
    if not JOB_NAME.match(spec.name):
        raise _fail(f"{spec.name!r} is not a job name: lowercase letters, digits and hyphens, "
                    "starting with a letter, at most 40 characters", ("name",), lines)
    try:
        acc = accelerator(spec.tpu.accelerator)
    except SpecError as exc:
        raise _fail(str(exc), ("tpu", "accelerator"), lines) from None
    zone = spec.tpu.zone or default_zone
    if not zone:
        raise _fail("no zone: set tpu.zone in the spec or `tpujob config set zone ZONE`",
                    ("tpu", "zone"), lines)
    if not ZONE_NAME.match(zone):
        raise _fail(f"{zone!r} is not a zone like us-central2-b", ("tpu", "zone"), lines)
    project = spec.tpu.project or default_project
    if not project:
        raise _fail("no project: set tpu.project or `tpujob config set project ID`", ("tpu", "project"), lines)
    if spec.tpu.queued and spec.tpu.provisioning == "preemptible":
        raise _fail("queued resources take spot or on-demand, not legacy preemptible VMs "
                    "(use provisioning: spot, or queued: false)", ("tpu", "provisioning"), lines)

    seen_mounts: dict[str, tuple] = {}
    seen_disks: set[str] = set()
    for i, disk in enumerate(spec.disks):
        base = ("disks", i)
        for key in ("name", "source_disk", "snapshot"):
            value = getattr(disk, key)
            if value is not None and not RESOURCE_NAME.match(value):
                raise _fail(f"{value!r} is not a valid disk or snapshot name", base + (key,), lines)
        if disk.name in seen_disks:
            raise _fail(f"disk {disk.name!r} is listed twice", base + ("name",), lines)
        seen_disks.add(disk.name)
        if disk.source_disk and disk.snapshot:
            raise _fail("give source_disk or snapshot, not both", base, lines)
        if disk.mode == "read-write" and (disk.source_disk or disk.snapshot):
            raise _fail("a clone (source_disk/snapshot) is attached read-only; a read-write disk is "
                        "the master itself", base + ("mode",), lines)
        if disk.source_disk == disk.name:
            raise _fail("the clone needs a name of its own, not its source disk's", base + ("name",), lines)
        _check_mount(disk.mount, base + ("mount",), seen_mounts, lines)
    disk_types = _check_disks(spec, acc, lines, acc.name)

    for i, bucket in enumerate(spec.buckets):
        base = ("buckets", i)
        if bucket.bucket.startswith("gs://"):
            raise _fail("give the bucket name without gs://", base + ("bucket",), lines)
        if not BUCKET_NAME.match(bucket.bucket) or ".." in bucket.bucket:
            raise _fail(f"{bucket.bucket!r} is not a valid bucket name", base + ("bucket",), lines)
        _check_mount(bucket.mount, base + ("mount",), seen_mounts, lines)
        _check_only_dir(bucket.only_dir, base + ("only_dir",), lines)

    for key in spec.env:
        if not ENV_NAME.match(key):
            raise _fail(f"{key!r} is not an environment variable name", ("env", key), lines)
        if key.startswith("TPUJOB_"):
            raise _fail(f"{key!r}: TPUJOB_* variables are set by tpujob itself", ("env", key), lines)
    for i, name in enumerate(spec.secrets):
        if not ENV_NAME.match(name):
            raise _fail(f"{name!r} is not an environment variable name", ("secrets", i), lines)
        if name in spec.env:
            raise _fail(f"{name!r} is both in env and in secrets", ("secrets", i), lines)

    if (spec.run.command is None) == (spec.run.runtime is None):
        raise _fail("give exactly one of run.command and run.runtime", ("run",), lines)
    if spec.run.runtime is not None:
        from tpujob.runtime.config import ConfigError as RuntimeConfigError, config_from_dict

        try:
            config_from_dict(spec.run.runtime)
        except RuntimeConfigError as exc:
            key = ("run", "runtime", *exc.key.split(".")) if exc.key else ("run", "runtime")
            message = str(exc).split(": ", 1)[1] if exc.key else str(exc)
            raise SpecError(message, field=_dotted(key), line=lines.get(key) or lines.get(("run", "runtime")))
    if spec.run.command is not None and not spec.run.command.strip():
        raise _fail("run.command is empty", ("run", "command"), lines)
    if spec.run.workdir is not None and not spec.run.workdir.strip():
        raise _fail("run.workdir is empty", ("run", "workdir"), lines)

    if spec.run_dir is not None:
        match = re.match(r"^gs://([^/]+)(/.*)?$", spec.run_dir)
        if not match or not BUCKET_NAME.match(match.group(1)):
            raise _fail(f"run_dir must be a gs://BUCKET/PATH location, not {spec.run_dir!r}", ("run_dir",), lines)
    _check_shared_run_dir(spec, acc, lines)

    sync_path = None
    if spec.sync is not None:
        path = Path(spec.sync).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_dir():
            raise _fail(f"sync directory {spec.sync!r} does not exist", ("sync",), lines)
        sync_path = str(path.resolve())

    for i, entry in enumerate(spec.tpu.fallback):
        base = ("tpu", "fallback", i)
        if entry.accelerator is None and entry.zone is None:
            raise _fail("a fallback names an accelerator, a zone or both", base, lines)
        if entry.zone is not None and not ZONE_NAME.match(entry.zone):
            raise _fail(f"{entry.zone!r} is not a zone like us-central2-b", base + ("zone",), lines)
        if entry.accelerator is not None:
            try:
                alt = accelerator(entry.accelerator)
            except SpecError as exc:
                raise _fail(str(exc), base + ("accelerator",), lines) from None
            _check_disks(spec, alt, lines, f"fallback {alt.name}", chosen=disk_types)
            _check_shared_run_dir(spec, alt, lines)
    _check_network(spec.tpu.network, [zone] + [f.zone for f in spec.tpu.fallback if f.zone], lines)
    _check_notify(spec.notify, lines)

    return ResolvedSpec(
        spec=spec, accelerator=acc.name, generation=acc.generation.alias, hosts=acc.hosts,
        chips=acc.chips, cores=acc.cores, zone=zone, project=project,
        runtime_version=spec.tpu.runtime_version or acc.generation.runtime_version,
        disk_types=disk_types, cost_per_hour_usd=_hourly_cost(acc, spec.tpu.provisioning),
        on_demand_cost_per_hour_usd=acc.hourly_cost(spot=False),
        sync_path=sync_path,
    )


def load(path: str | Path, *, default_zone: str = "", default_project: str = "") -> tuple[ResolvedSpec, str]:
    """Read, parse and resolve a spec file. Returns the resolved spec and the text as submitted."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    spec, lines = parse(text, source=str(path))
    resolved = resolve(spec, lines, default_zone=default_zone, default_project=default_project,
                       base_dir=path.resolve().parent)
    return resolved, text
