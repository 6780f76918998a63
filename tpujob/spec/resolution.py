"""Resolution: a parsed JobSpec checked against the TPU catalogue and the settings (zones,
hosts, disk types, mounts, networks, notify channels) and given every default, as the
ResolvedSpec the store keeps. Every refusal is one SpecError naming the field and its line.
Mount paths are checked in mount_paths.py, the API and Compute Engine settings in
compute_engine.py."""

from __future__ import annotations

from pathlib import Path

from tpujob.catalogue import COMPUTE, NEVER_READ_ONLY, Accelerator, accelerator
from tpujob.errors import SpecError
from tpujob.names import CLONE_NAME_ROOM, split_gs
from tpujob.runtime.contract import MAX_ARG_BYTES, MAX_ENV_BYTES, MAX_PATH_BYTES
from tpujob.spec.compute_engine import check_fallback_api, choose_api
from tpujob.spec.lines import dotted, field_error, parse
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
    JobSpec,
    NetworkSpec,
    NotifySpec,
    ResolvedSpec,
    SetupSpec,
)
from tpujob.spec.mount_paths import check_mount, check_only_dir


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
            raise field_error(f"disk {disk.name}: type {disk_type!r} is not allowed on {gen.alias} "
                              f"({where}), which takes {' or '.join(gen.disk_types)}", base + ("type",), lines)
        if disk.mode == "read-only" and disk_type in NEVER_READ_ONLY:
            raise field_error(f"disk {disk.name}: {NEVER_READ_ONLY[disk_type]} ({where}); give it type "
                              f"{' or '.join(t for t in gen.disk_types if t not in NEVER_READ_ONLY)} to "
                              "attach it read-only", base + ("type",), lines)
        if disk.mode == "read-write" and spec.tpu.max_slices > 1:
            raise field_error(f"a read-write disk cannot be attached to {spec.tpu.max_slices} slices: a disk is "
                              "attached read-write to one node only; clone it (snapshot + clone) and mount "
                              "the clone read-only", base + ("mode",), lines)
        if disk.mode == "read-write" and acc.multi_host:
            raise field_error(f"a read-write disk cannot be attached to {acc.name} ({acc.hosts} hosts, {where}): "
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
            raise field_error(f"fallback zone {fallback_zone}: disk {disk.name} is a {what}, a zonal disk "
                              f"in {zone} that cannot be attached in {fallback_zone}; clone it (snapshot: or "
                              "source_disk:, read-only) or drop this fallback's zone", where, lines)


def _check_shared_run_dir(spec: JobSpec, acc: Accelerator, lines) -> None:
    """The runtime's hosts write one checkpoint together: with each host's run dir in its own
    home, Orbax waits forever at the first save for the other hosts' files."""
    if spec.run.runtime is not None and spec.run_dir is None and acc.multi_host:
        raise field_error(f"run.runtime on {acc.name} ({acc.hosts} hosts) needs a run dir shared by every "
                          "host: set run_dir: gs://BUCKET/PATH", ("run_dir",), lines)


def _check_network(net: NetworkSpec, zones: list[str], lines) -> None:
    base = ("tpu", "network")
    if net.network is not None and not NETWORK_REF.fullmatch(net.network):
        raise field_error(f"{net.network!r} is not a network: give its name (e.g. default) or its path "
                          "projects/PROJECT/global/networks/NAME", base + ("network",), lines)
    if net.subnetwork is not None:
        match = SUBNETWORK_REF.fullmatch(net.subnetwork)
        if not match:
            raise field_error(f"{net.subnetwork!r} is not a subnetwork: give its name or its path "
                              "projects/PROJECT/regions/REGION/subnetworks/NAME", base + ("subnetwork",), lines)
        # A subnetwork is regional: a node in a zone of another region cannot use it.
        elsewhere = [z for z in zones if match["region"] and not z.startswith(match["region"] + "-")]
        if elsewhere:
            raise field_error(f"subnetwork {net.subnetwork!r} is in region {match['region']}, but the job may "
                              f"run in zone {elsewhere[0]}", base + ("subnetwork",), lines)
    seen: set[str] = set()
    for i, tag in enumerate(net.tags):
        if not NETWORK_TAG.fullmatch(tag):
            raise field_error(f"{tag!r} is not a network tag: 1-63 lowercase letters, digits and hyphens, "
                              "starting with a letter and not ending with a hyphen", base + ("tags", i), lines)
        if tag in seen:
            raise field_error(f"tag {tag!r} is listed twice", base + ("tags", i), lines)
        seen.add(tag)


def _check_notify(channels: list[NotifySpec], lines) -> None:
    """Each channel is one webhook or one email address. No message quotes a webhook URL: it
    may be a secret."""
    from urllib.parse import urlsplit

    for i, channel in enumerate(channels):
        base = ("notify", i)
        if (channel.webhook is None) == (channel.email is None):
            raise field_error("a notify entry has exactly one of webhook and email", base, lines)
        if channel.webhook is not None and not WEBHOOK_SECRET.fullmatch(channel.webhook):
            try:
                parts = urlsplit(channel.webhook)
                host = parts.hostname
                parts.port  # noqa: B018 (raises on a port that is not a number)
            except ValueError:
                host, parts = None, None
            if parts is None or parts.scheme not in ("http", "https") or not host:
                raise field_error("webhook must be an http:// or https:// URL, or ${NAME} naming a secret "
                                  "that holds one", base + ("webhook",), lines)
        if channel.email is not None and not EMAIL_ADDRESS.fullmatch(channel.email):
            raise field_error(f"{channel.email!r} is not an email address", base + ("email",), lines)
        if not channel.on:
            raise field_error(f"on lists nothing: give some of {', '.join(NOTIFY_ON)}", base + ("on",), lines)
        seen = set()
        for j, kind in enumerate(channel.on):
            if kind in seen:
                raise field_error(f"{kind!r} is listed twice", base + ("on", j), lines)
            seen.add(kind)


def webhook_secrets(spec: JobSpec) -> list[str]:
    """The secret names the spec's webhooks refer to (`${NAME}`)."""
    return [m.group(1) for c in spec.notify if c.webhook and (m := WEBHOOK_SECRET.fullmatch(c.webhook))]


def _hourly_cost(acc: Accelerator, provisioning: str) -> float | None:
    """The price per hour of the slice as provisioned: the on-demand list price, or the spot
    (preemptible) price. None where the catalogue has no published figure (spot on some
    generations, flex-start and reservations on all): the on-demand price is three times or
    more the spot one, so passing it off as the estimate misleads."""
    return acc.price_for(provisioning)




def _times(cost: float | None, slices: int) -> float | None:
    return None if cost is None else cost * slices


def _check_setup(spec: JobSpec, sync_path: str | None, lines) -> None:
    """The long form of setup: a command, cache paths that are paths, key files in the sync dir;
    a cache lives in the run dir's bucket (tpujob-cache/), so it needs `run_dir: gs://...`."""
    setup = spec.setup
    if not isinstance(setup, SetupSpec):
        return
    if not setup.run.strip():
        raise field_error("setup.run is empty", ("setup", "run"), lines)
    for i, path in enumerate(setup.cache):
        parts = path.replace("~/", "", 1).split("/")
        if not path.strip() or ".." in parts or path.strip() in ("/", "~", "~/") or "\n" in path:
            raise field_error(f"setup.cache: {path!r} is not a directory or file to cache",
                              ("setup", "cache", i), lines)
    if setup.cache and spec.run_dir is None:
        raise field_error("setup.cache is kept in the run dir's bucket: set run_dir: gs://BUCKET/PATH",
                          ("setup", "cache"), lines)
    for i, name in enumerate(setup.key_files):
        if sync_path is None:
            raise field_error("setup.key_files are read from the sync directory: set sync",
                              ("setup", "key_files", i), lines)
        if Path(name).is_absolute() or ".." in Path(name).parts or not (Path(sync_path) / name).is_file():
            raise field_error(f"setup.key_files: {name!r} is not a file in the sync directory {sync_path}",
                              ("setup", "key_files", i), lines)


def _check_host_limits(spec: JobSpec, lines) -> None:
    """What the hosts cannot take, refused here rather than on a paid slice: each command runs
    as `bash -c COMMAND`, one argument of at most MAX_ARG_BYTES (Linux's MAX_ARG_STRLEN), a path
    on the hosts has at most MAX_PATH_BYTES, and the env is exported, each NAME=VALUE as long as
    an argument at most, MAX_ENV_BYTES in all (runtime.contract)."""
    commands = [(("setup", "run") if isinstance(spec.setup, SetupSpec) else ("setup",), spec.setup_command),
                (("run", "command"), spec.run.command or "")]
    for where, command in commands:
        size = len(command.encode())
        if size > MAX_ARG_BYTES:
            raise field_error(f"the command is {size} bytes; a host runs at most {MAX_ARG_BYTES} as one "
                              "argument (Linux's MAX_ARG_STRLEN): put it in a script in the sync directory "
                              "and run that", where, lines)
        if "\0" in command:
            raise field_error("the command contains a NUL byte", where, lines)
    paths: list[tuple[tuple, str]] = [(("run", "workdir"), spec.run.workdir or "")]
    paths += [(("disks", i, "mount"), disk.mount) for i, disk in enumerate(spec.disks)]
    paths += [(("buckets", i, key), getattr(bucket, key) or "") for i, bucket in enumerate(spec.buckets)
              for key in ("mount", "cache_dir")]
    if isinstance(spec.setup, SetupSpec):
        paths += [(("setup", "cache", i), path) for i, path in enumerate(spec.setup.cache)]
    for where, path in paths:
        if len(path.encode()) > MAX_PATH_BYTES:
            raise field_error(f"the path is {len(path.encode())} bytes; a host takes at most {MAX_PATH_BYTES} "
                              "(Linux's PATH_MAX)", where, lines)
    total = 0
    for key, value in spec.env.items():
        size = len(f"{key}={value}".encode())
        total += size + 1
        if "\0" in value:
            raise field_error(f"{key} contains a NUL byte", ("env", key), lines)
        if size > MAX_ARG_BYTES:
            raise field_error(f"{key}={{...}} is {size} bytes; a host takes at most {MAX_ARG_BYTES} per variable "
                              "(Linux's MAX_ARG_STRLEN)", ("env", key), lines)
    if total > MAX_ENV_BYTES:
        raise field_error(f"the env is {total} bytes in all; tpujob passes at most {MAX_ENV_BYTES} to a host",
                          ("env",), lines)


def _check_slices(spec: JobSpec, acc: Accelerator, where: tuple, lines) -> None:
    """Multislice: TPU v4 or later, every slice the same type in one zone (Google's multislice
    introduction: cloud.google.com/tpu/docs/multislice-introduction).
    Checked for the primary accelerator and for each fallback's (`where`: the field)."""
    if spec.tpu.max_slices == 1:
        return
    if acc.generation.alias in ("v2", "v3"):
        raise field_error(f"multislice needs TPU v4 or later, not {acc.generation.alias}", where, lines)
    if spec.tpu.elastic and spec.tpu.queued:
        # One multislice queued resource is suspended whole when one slice is lost (the
        # emulator's reading, docs/multislice.md): the slices an elastic job trains on must be
        # made apart.
        raise field_error("an elastic job's slices are made apart, so that losing one keeps the others: "
                          "set tpu.queued: false", ("tpu", "queued"), lines)


def resolve(spec: JobSpec, lines: dict[tuple, int] | None = None, *, default_zone: str = "",
            default_project: str = "", base_dir: Path | None = None) -> ResolvedSpec:
    lines = lines or {}
    if not JOB_NAME.fullmatch(spec.name):
        raise field_error(f"{spec.name!r} is not a job name: lowercase letters, digits and hyphens, "
                          "starting with a letter, at most 40 characters", ("name",), lines)
    try:
        acc = accelerator(spec.tpu.accelerator)
    except SpecError as exc:
        raise field_error(str(exc), ("tpu", "accelerator"), lines) from None
    zone = spec.tpu.zone or default_zone
    if not zone:
        raise field_error("no zone: set tpu.zone in the spec or `tpujob config set zone ZONE`",
                          ("tpu", "zone"), lines)
    if not ZONE_NAME.fullmatch(zone):
        raise field_error(f"{zone!r} is not a zone like us-central2-b", ("tpu", "zone"), lines)
    project = spec.tpu.project or default_project
    if not project:
        raise field_error("no project: set tpu.project or `tpujob config set project ID`", ("tpu", "project"), lines)
    api, compute = choose_api(spec, acc, lines)
    if api == COMPUTE and spec.tpu.queued:
        # The default (queued: true) is the TPU API's: on Compute Engine the VMs are made directly.
        spec = spec.model_copy(update={"tpu": spec.tpu.model_copy(update={"queued": False})})
    if spec.tpu.queued and spec.tpu.provisioning == "preemptible":
        raise field_error("queued resources take spot or on-demand, not legacy preemptible VMs "
                          "(use provisioning: spot, or queued: false)", ("tpu", "provisioning"), lines)
    _check_slices(spec, acc, ("tpu", "slices"), lines)

    seen_mounts: dict[str, tuple] = {}
    seen_disks: set[str] = set()
    for i, disk in enumerate(spec.disks):
        base: tuple[str | int, ...] = ("disks", i)
        for key in ("name", "source_disk", "snapshot"):
            value = getattr(disk, key)
            if value is not None and not RESOURCE_NAME.fullmatch(value):
                raise field_error(f"{value!r} is not a valid disk or snapshot name", base + (key,), lines)
        if disk.name in seen_disks:
            raise field_error(f"disk {disk.name!r} is listed twice", base + ("name",), lines)
        seen_disks.add(disk.name)
        if disk.source_disk and disk.snapshot:
            raise field_error("give source_disk or snapshot, not both", base, lines)
        if disk.mode == "read-write" and (disk.source_disk or disk.snapshot):
            raise field_error("a clone (source_disk/snapshot) is attached read-only; a read-write disk is "
                              "the master itself", base + ("mode",), lines)
        if disk.source_disk == disk.name:
            raise field_error("the clone needs a name of its own, not its source disk's", base + ("name",), lines)
        if (disk.source_disk or disk.snapshot) and len(disk.name) > CLONE_NAME_ROOM:
            # Checked here, not on the model: a spec stored before names carried the store's tag
            # (up to 56 characters then) still loads.
            raise field_error(f"a clone's name may have at most {CLONE_NAME_ROOM} characters: its clone is "
                              f"named {disk.name}-STORE-JOBID and its snapshot {disk.name}-src-STORE-JOBID "
                              "(tpujob/names.py), and disk names have at most 63", base + ("name",), lines)
        check_mount(disk.mount, base + ("mount",), seen_mounts, lines)
    disk_types = _check_disks(spec, acc, lines, acc.name)

    for i, bucket in enumerate(spec.buckets):
        base = ("buckets", i)
        if bucket.bucket.startswith("gs://"):
            raise field_error("give the bucket name without gs://", base + ("bucket",), lines)
        if not BUCKET_NAME.fullmatch(bucket.bucket) or ".." in bucket.bucket:
            raise field_error(f"{bucket.bucket!r} is not a valid bucket name", base + ("bucket",), lines)
        check_mount(bucket.mount, base + ("mount",), seen_mounts, lines)
        check_only_dir(bucket.only_dir, base + ("only_dir",), lines)

    for key in spec.env:
        if not ENV_NAME.fullmatch(key):
            raise field_error(f"{key!r} is not an environment variable name", ("env", key), lines)
        if key.startswith("TPUJOB_"):
            raise field_error(f"{key!r}: TPUJOB_* variables are set by tpujob itself", ("env", key), lines)
    for i, name in enumerate(spec.secrets):
        if not ENV_NAME.fullmatch(name):
            raise field_error(f"{name!r} is not an environment variable name", ("secrets", i), lines)
        if name in spec.env:
            raise field_error(f"{name!r} is both in env and in secrets", ("secrets", i), lines)

    if (spec.run.command is None) == (spec.run.runtime is None):
        raise field_error("give exactly one of run.command and run.runtime", ("run",), lines)
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
        raise field_error("run.command is empty", ("run", "command"), lines)
    if spec.run.workdir is not None and not spec.run.workdir.strip():
        raise field_error("run.workdir is empty", ("run", "workdir"), lines)

    if spec.run_dir is not None:
        located = split_gs(spec.run_dir)
        if not located or not BUCKET_NAME.fullmatch(located[0]):
            raise field_error(f"run_dir must be a gs://BUCKET/PATH location, not {spec.run_dir!r}", ("run_dir",), lines)
    _check_shared_run_dir(spec, acc, lines)

    sync_path = None
    if spec.sync is not None:
        path = Path(spec.sync).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_dir():
            raise field_error(f"sync directory {spec.sync!r} does not exist", ("sync",), lines)
        sync_path = str(path.resolve())

    _check_setup(spec, sync_path, lines)
    _check_host_limits(spec, lines)

    for i, entry in enumerate(spec.tpu.fallback):
        base = ("tpu", "fallback", i)
        if entry.accelerator is None and entry.zone is None:
            raise field_error("a fallback names an accelerator, a zone or both", base, lines)
        if entry.zone is not None and not ZONE_NAME.fullmatch(entry.zone):
            raise field_error(f"{entry.zone!r} is not a zone like us-central2-b", base + ("zone",), lines)
        if entry.zone is not None:
            _check_fallback_zone(spec, zone, entry.zone, base + ("zone",), lines)
        if entry.accelerator is not None:
            try:
                alt = accelerator(entry.accelerator)
            except SpecError as exc:
                raise field_error(str(exc), base + ("accelerator",), lines) from None
            check_fallback_api(api, alt, base + ("accelerator",), lines, spec.tpu.provisioning)
            _check_slices(spec, alt, base + ("accelerator",), lines)
            _check_disks(spec, alt, lines, f"fallback {alt.name}", chosen=disk_types)
            _check_shared_run_dir(spec, alt, lines)
    _check_network(spec.tpu.network, [z for _, z in spec.tpu.placements(acc.name, zone)], lines)
    _check_notify(spec.notify, lines)
    cost = _times(_hourly_cost(acc, spec.tpu.provisioning), spec.tpu.max_slices)
    if spec.max_cost is not None and cost is None:
        raise field_error(f"no published price for {acc.name} at {spec.tpu.provisioning}: a cost cap cannot be "
                          "kept (remove max_cost, or use spot or on-demand where Google lists a price)",
                          ("max_cost",), lines)

    return ResolvedSpec(
        spec=spec, accelerator=acc.name, generation=acc.generation.alias, hosts=acc.hosts,
        chips=acc.chips, cores=acc.cores, slices=spec.tpu.max_slices, min_slices=spec.tpu.min_slices,
        zone=zone, project=project,
        runtime_version=(compute.image_family if compute is not None
                         else spec.tpu.runtime_version or acc.generation.runtime_version),
        disk_types=disk_types, cost_per_hour_usd=cost,
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
