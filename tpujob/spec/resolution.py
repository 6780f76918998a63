"""Resolution: a parsed JobSpec checked against the TPU catalogue and the settings (zones,
hosts, disk types, mounts, networks, notify channels) and given every default, as the
ResolvedSpec the store keeps. Every refusal is one SpecError naming the field and its line."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Literal

from tpujob.catalogue import NEVER_READ_ONLY, Accelerator, NoComputeShape, accelerator, compute_shape
from tpujob.errors import SpecError
from tpujob.names import RUN_DIR_MOUNT  # where the run dir's bucket is mounted: no spec mount may take it
from tpujob.spec.lines import dotted, parse
from tpujob.spec.models import (
    BUCKET_NAME,
    EMAIL_ADDRESS,
    ENV_NAME,
    JOB_NAME,
    NETWORK_REF,
    NETWORK_TAG,
    NOTIFY_ON,
    RESOURCE_NAME,
    SUBNETWORK_REF,
    WEBHOOK_SECRET,
    ZONE_NAME,
    ComputePlacement,
    JobSpec,
    NetworkSpec,
    NotifySpec,
    ResolvedSpec,
    SetupSpec,
)

Api = Literal["tpu-vm", "compute"]  # the API a slice is made through (ResolvedSpec.api)


def _fail(message: str, path: tuple, lines: dict[tuple, int]) -> SpecError:
    return SpecError(message, field=dotted(path), line=lines.get(path))


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
        raise _fail(f"mount path {norm!r} is already used by {dotted(seen[norm])}", where, lines)
    # Nested mounts depend on their order and break on a read-only parent (no mount point can
    # be made on it); one would also hide the other's files on an unmount/remount.
    for other, other_where in seen.items():
        if _inside(norm, other):
            raise _fail(f"mount path {norm!r} is nested inside {dotted(other_where)} ({other!r}); "
                        "give every disk and bucket a directory of its own", where, lines)
        if _inside(other, norm):
            raise _fail(f"mount path {norm!r} would contain {dotted(other_where)} ({other!r}); "
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
        if disk.mode == "read-only" and disk_type in NEVER_READ_ONLY:
            raise _fail(f"disk {disk.name}: {NEVER_READ_ONLY[disk_type]} ({where}); give it type "
                        f"{' or '.join(t for t in gen.disk_types if t not in NEVER_READ_ONLY)} to "
                        "attach it read-only", base + ("type",), lines)
        if disk.mode == "read-write" and spec.tpu.max_slices > 1:
            raise _fail(f"a read-write disk cannot be attached to {spec.tpu.max_slices} slices: a disk is "
                        "attached read-write to one node only; clone it (snapshot + clone) and mount "
                        "the clone read-only", base + ("mode",), lines)
        if disk.mode == "read-write" and acc.multi_host:
            raise _fail(f"a read-write disk cannot be attached to {acc.name} ({acc.hosts} hosts, {where}): "
                        "multi-host slices attach disks read-only; clone it (snapshot + clone) and "
                        "mount the clone read-only", base + ("mode",), lines)
        types[disk.name] = disk_type
    return types


def _check_fallback_zone(spec: JobSpec, zone: str, fallback_zone: str, where: tuple, lines) -> None:
    """A disk is zonal: one that is not a clone (a read-write master, or a disk that must exist)
    cannot follow the job to a fallback in another zone, and tpujob never makes an empty disk
    there in its place. A clone can: it is made from the (global) snapshot in that zone."""
    if fallback_zone == zone:
        return
    for disk in spec.disks:
        if not (disk.source_disk or disk.snapshot):
            what = "read-write master" if disk.mode == "read-write" else "read-only disk that is not a clone"
            raise _fail(f"fallback zone {fallback_zone}: disk {disk.name} is a {what}, a zonal disk "
                        f"in {zone} that cannot be attached in {fallback_zone}; clone it (snapshot: or "
                        "source_disk:, read-only) or drop this fallback's zone", where, lines)


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
    (preemptible) price. None where the catalogue has no published figure (spot on some
    generations, flex-start and reservations on all): the on-demand price is three times or
    more the spot one, so passing it off as the estimate misleads."""
    return acc.price_for(provisioning)


# Compute Engine's limits on scheduling.maxRunDuration: flex-start VMs "run up to seven days"
# (https://cloud.google.com/compute/docs/tpus/tpu-machines); any other VM from 30 seconds to
# 120 days, except legacy preemptible VMs, which take no time limit
# (https://cloud.google.com/compute/docs/instances/limit-vm-runtime, "Limitations").
_FLEX_START_MAX = 7 * 86400
_RUN_LIMIT_MIN, _RUN_LIMIT_MAX = 30, 120 * 86400
# reservationAffinity.values: a name, or projects/P/reservations/NAME (compute.v1 discovery,
# ReservationAffinity; Google's create example passes the latter).
RESERVATION_REF = re.compile(r"^(?:projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?"
                             r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")


def _days(seconds: int) -> str:
    return f"{seconds / 86400:g} days" if seconds % 3600 == 0 and seconds >= 86400 else f"{seconds} s"


def _api(spec: JobSpec, acc: Accelerator, lines) -> tuple[Api, ComputePlacement | None]:
    """The API the slice is made through, its Compute Engine form, and the rules that follow
    from it: auto is compute for a generation the TPU API does not serve (TPU7x: "The Cloud TPU
    API is not supported on TPU7x and later", shared/facts/compute-engine-tpu.md), tpu-vm
    otherwise; compute only for v5p, v6e, TPU7x (tpujob.catalogue.COMPUTE_FORMS)."""
    tpu = spec.tpu
    api: Api = tpu.api if tpu.api != "auto" else ("tpu-vm" if acc.generation.tpu_api else "compute")
    if api == "tpu-vm":
        if not acc.generation.tpu_api:
            raise _fail(f"the Cloud TPU API does not serve {acc.generation.alias} (Google: not supported on "
                        f"TPU7x and later); use api: compute (or auto)", ("tpu", "api"), lines)
        if tpu.provisioning in ("flex-start", "reservation"):
            raise _fail(f"provisioning: {tpu.provisioning} is made through Compute Engine: set tpu.api: compute "
                        "(v5p, v6e, tpu7x)", ("tpu", "provisioning"), lines)
        for key in ("reservation", "max_run_duration"):
            if getattr(tpu, key) is not None:
                raise _fail(f"tpu.{key} is a Compute Engine setting: set tpu.api: compute (v5p, v6e, tpu7x)",
                            ("tpu", key), lines)
        return api, None

    try:
        shape = compute_shape(acc)
    except NoComputeShape as exc:
        raise _fail(str(exc), ("tpu", "api") if tpu.api == "compute" else ("tpu", "accelerator"), lines) from None
    if tpu.provisioning == "preemptible":
        raise _fail("legacy preemptible VMs are a TPU API option; Compute Engine TPU VMs are spot, "
                    "on-demand, flex-start or reservation: use provisioning: spot", ("tpu", "provisioning"), lines)
    if tpu.queued and "queued" in tpu.model_fields_set:
        raise _fail("queued resources are a Cloud TPU API feature; the Compute Engine path creates VMs "
                    "directly: remove queued or set it to false", ("tpu", "queued"), lines)
    if tpu.max_slices > 1:
        raise _fail("multislice on the Compute Engine path is not supported yet: use slices: 1, or "
                    "api: tpu-vm on v5p/v6e", ("tpu", "slices"), lines)
    if tpu.runtime_version is not None:
        raise _fail(f"a Compute Engine TPU VM boots an image ({shape.image_family}), not a TPU runtime "
                    "version: remove runtime_version", ("tpu", "runtime_version"), lines)
    if tpu.provisioning == "reservation":
        if tpu.reservation is None:
            raise SpecError("provisioning: reservation needs the reservation to consume: set tpu.reservation: "
                            "NAME", field="tpu.reservation", line=lines.get(("tpu", "provisioning")))
        if not RESERVATION_REF.match(tpu.reservation):
            raise _fail(f"{tpu.reservation!r} is not a reservation: give its name or "
                        "projects/PROJECT/reservations/NAME", ("tpu", "reservation"), lines)
    elif tpu.reservation is not None:
        raise _fail(f"tpu.reservation is consumed only with provisioning: reservation (not {tpu.provisioning})",
                    ("tpu", "reservation"), lines)
    limit = tpu.max_run_duration
    if tpu.provisioning == "flex-start":
        if limit is None:
            raise SpecError("provisioning: flex-start needs tpu.max_run_duration (how long the VMs may run, "
                            "at most 7 days), e.g. 24h", field="tpu.max_run_duration",
                            line=lines.get(("tpu", "provisioning")))
        if limit > _FLEX_START_MAX:
            raise _fail(f"{_days(limit)} is longer than flex-start allows: flex-start VMs run at most 7 days "
                        "(604800 s)", ("tpu", "max_run_duration"), lines)
    if limit is not None and not _RUN_LIMIT_MIN <= limit <= _RUN_LIMIT_MAX:
        raise _fail(f"{_days(limit)} is outside Compute Engine's run time limits (30 s to 120 days)",
                    ("tpu", "max_run_duration"), lines)
    return api, ComputePlacement(machine_type=shape.machine_type, hosts=shape.hosts,
                                 chips_per_host=shape.chips_per_host, topology=shape.topology,
                                 boot_disk_type=shape.boot_disk_type, image_family=shape.image_family,
                                 image_project=shape.image_project)


def _check_fallback_api(api: str, alt: Accelerator, where: tuple, lines) -> None:
    """Every placement is made through the job's API: a fallback accelerator must exist there."""
    if api == "tpu-vm" and not alt.generation.tpu_api:
        raise _fail(f"{alt.name}: the Cloud TPU API does not serve {alt.generation.alias}, and this job's "
                    "slices are made through it (tpu.api)", where, lines)
    if api == "compute":
        try:
            compute_shape(alt)
        except NoComputeShape as exc:
            raise _fail(f"{exc} (this job's slices are made through Compute Engine)", where, lines) from None


def _times(cost: float | None, slices: int) -> float | None:
    return None if cost is None else cost * slices


def _check_setup(spec: JobSpec, sync_path: str | None, lines) -> None:
    """The long form of setup: a command, cache paths that are paths, key files in the sync dir;
    a cache lives in the run dir's bucket (tpujob-cache/), so it needs `run_dir: gs://...`."""
    setup = spec.setup
    if not isinstance(setup, SetupSpec):
        return
    if not setup.run.strip():
        raise _fail("setup.run is empty", ("setup", "run"), lines)
    for i, path in enumerate(setup.cache):
        parts = path.replace("~/", "", 1).split("/")
        if not path.strip() or ".." in parts or path.strip() in ("/", "~", "~/") or "\n" in path:
            raise _fail(f"setup.cache: {path!r} is not a directory or file to cache", ("setup", "cache", i), lines)
    if setup.cache and spec.run_dir is None:
        raise _fail("setup.cache is kept in the run dir's bucket: set run_dir: gs://BUCKET/PATH",
                    ("setup", "cache"), lines)
    for i, name in enumerate(setup.key_files):
        if sync_path is None:
            raise _fail("setup.key_files are read from the sync directory: set sync", ("setup", "key_files", i), lines)
        if Path(name).is_absolute() or ".." in Path(name).parts or not (Path(sync_path) / name).is_file():
            raise _fail(f"setup.key_files: {name!r} is not a file in the sync directory {sync_path}",
                        ("setup", "key_files", i), lines)


def _check_slices(spec: JobSpec, acc: Accelerator, where: tuple, lines) -> None:
    """Multislice: TPU v4 or later, every slice the same type in one zone (Google's multislice
    introduction: cloud.google.com/tpu/docs/multislice-introduction; shared/facts/operations.md).
    Checked for the primary accelerator and for each fallback's (`where`: the field)."""
    if spec.tpu.max_slices == 1:
        return
    if acc.generation.alias in ("v2", "v3"):
        raise _fail(f"multislice needs TPU v4 or later, not {acc.generation.alias}", where, lines)
    if spec.tpu.elastic and spec.tpu.queued:
        # One multislice queued resource is suspended whole when one slice is lost (the
        # emulator's reading, docs/multislice.md): the slices an elastic job trains on must be
        # made apart.
        raise _fail("an elastic job's slices are made apart, so that losing one keeps the others: "
                    "set tpu.queued: false", ("tpu", "queued"), lines)


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
    api, compute = _api(spec, acc, lines)
    if api == "compute" and spec.tpu.queued:
        # The default (queued: true) is the TPU API's: on Compute Engine the VMs are made directly.
        spec = spec.model_copy(update={"tpu": spec.tpu.model_copy(update={"queued": False})})
    if spec.tpu.queued and spec.tpu.provisioning == "preemptible":
        raise _fail("queued resources take spot or on-demand, not legacy preemptible VMs "
                    "(use provisioning: spot, or queued: false)", ("tpu", "provisioning"), lines)
    _check_slices(spec, acc, ("tpu", "slices"), lines)

    seen_mounts: dict[str, tuple] = {}
    seen_disks: set[str] = set()
    for i, disk in enumerate(spec.disks):
        base: tuple[str | int, ...] = ("disks", i)
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
        from tpujob.runtime.config import ConfigError as RuntimeConfigError
        from tpujob.runtime.config import config_from_dict

        try:
            config_from_dict(spec.run.runtime)
        except RuntimeConfigError as exc:
            at = ("run", "runtime", *exc.key.split(".")) if exc.key else ("run", "runtime")
            message = str(exc).split(": ", 1)[1] if exc.key else str(exc)
            raise SpecError(message, field=dotted(at),
                            line=lines.get(at) or lines.get(("run", "runtime"))) from exc
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

    _check_setup(spec, sync_path, lines)

    for i, entry in enumerate(spec.tpu.fallback):
        base = ("tpu", "fallback", i)
        if entry.accelerator is None and entry.zone is None:
            raise _fail("a fallback names an accelerator, a zone or both", base, lines)
        if entry.zone is not None and not ZONE_NAME.match(entry.zone):
            raise _fail(f"{entry.zone!r} is not a zone like us-central2-b", base + ("zone",), lines)
        if entry.zone is not None:
            _check_fallback_zone(spec, zone, entry.zone, base + ("zone",), lines)
        if entry.accelerator is not None:
            try:
                alt = accelerator(entry.accelerator)
            except SpecError as exc:
                raise _fail(str(exc), base + ("accelerator",), lines) from None
            _check_fallback_api(api, alt, base + ("accelerator",), lines)
            _check_slices(spec, alt, base + ("accelerator",), lines)
            _check_disks(spec, alt, lines, f"fallback {alt.name}", chosen=disk_types)
            _check_shared_run_dir(spec, alt, lines)
    _check_network(spec.tpu.network, [zone] + [f.zone for f in spec.tpu.fallback if f.zone], lines)
    _check_notify(spec.notify, lines)

    return ResolvedSpec(
        spec=spec, accelerator=acc.name, generation=acc.generation.alias, hosts=acc.hosts,
        chips=acc.chips, cores=acc.cores, slices=spec.tpu.max_slices, min_slices=spec.tpu.min_slices,
        zone=zone, project=project,
        runtime_version=(compute.image_family if compute is not None
                         else spec.tpu.runtime_version or acc.generation.runtime_version),
        disk_types=disk_types, cost_per_hour_usd=_times(_hourly_cost(acc, spec.tpu.provisioning), spec.tpu.max_slices),
        on_demand_cost_per_hour_usd=_times(acc.hourly_cost(spot=False), spec.tpu.max_slices),
        sync_path=sync_path, api=api, provisioning=spec.tpu.provisioning, reservation=spec.tpu.reservation,
        max_run_duration_seconds=spec.tpu.max_run_duration, compute=compute,
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
