"""A job's storage: its disks (clone and scale), its buckets, its run dir on GCS.

Clone and scale: a disk with `source_disk` is snapshotted (`NAME-src-JOBID`) and cloned as
`NAME-JOBID`; a disk with `snapshot` is cloned from it. The clone belongs to its job (named after
it and labelled `tpujob-job: JOBID`): two jobs from one spec get a clone each. It is made by the
first attempt and reused by every later one (a re-queued run sees the data the first attempt
saw), then deleted with the job unless `keep`. The host side mounts every disk and bucket before
setup. The run dir on GCS is read through google-cloud-storage: the sweep and `show` know how
the program ended without SSH.
"""

from __future__ import annotations

import re

from tpujob.cloud.base import DataDisk
from tpujob.errors import ConflictError, NotFoundError, UsageError
from tpujob.hosts.scripts import render
from tpujob.runtime.contract import RunDirStatus
from tpujob.spec import BucketSpec, DiskSpec, ResolvedSpec
from tpujob.names import (JOB_LABEL, RUN_DIR_MOUNT, clone_name, format_job_id, host_local_run_dir,
                          job_labels, run_dir_prefix, snapshot_name)


def is_clone(disk: DiskSpec) -> bool:
    return bool(disk.source_disk or disk.snapshot)


def device_name(disk: DiskSpec, job_id: int) -> str:
    """The name the disk has in the cloud, hence on the hosts (/dev/disk/by-id/google-NAME)."""
    return clone_name(disk.name, job_id) if is_clone(disk) else disk.name


def split_gs(url: str) -> tuple[str, str] | None:
    """gs://BUCKET/PREFIX -> (BUCKET, PREFIX without slashes at its ends); None if not gs://."""
    match = re.match(r"^gs://([^/]+)/?(.*)$", url)
    return (match.group(1), match.group(2).strip("/")) if match else None


def run_dir_location(spec: ResolvedSpec, job_id: int) -> tuple[str, str] | None:
    """(bucket, object prefix of the job's run dir) when the spec sets `run_dir: gs://...`."""
    run_dir = spec.spec.run_dir
    if not run_dir:
        return None
    bucket, prefix = split_gs(run_dir)
    return bucket, run_dir_prefix(prefix, job_id)


def host_run_dir(spec: ResolvedSpec, job_id: int) -> str | None:
    """TPUJOB_RUN_DIR on the hosts when the run dir is on GCS (mounted at RUN_DIR_MOUNT)."""
    location = run_dir_location(spec, job_id)
    return f"{RUN_DIR_MOUNT}/{location[1]}" if location else None


def host_run_dir_for(spec: ResolvedSpec, job_id: int, ssh_user: str) -> str:
    """TPUJOB_RUN_DIR on the hosts: on GCS when the spec says so, else host-local."""
    home = "/root" if ssh_user == "root" else f"/home/{ssh_user}"
    return host_run_dir(spec, job_id) or host_local_run_dir(home, job_id)


# ---- before anything is spent -----------------------------------------------------------------

def existing_disks(spec: ResolvedSpec) -> list[DiskSpec]:
    """The disks that must exist before the job: read-only and not a clone (tpujob would make
    an empty disk, which read-only holds nothing and can never be written)."""
    return [d for d in spec.spec.disks if d.mode == "read-only" and not is_clone(d)]


def check_existing_disks(compute, spec: ResolvedSpec) -> None:
    """One Compute get per disk of `existing_disks`: missing is NotFoundError (exit 3); a type
    the generation does not take, or a Hyperdisk not made for read-only use, is UsageError
    (the attach would be refused)."""
    from tpujob.catalogue import generation

    project, zone = spec.project, spec.zone
    takes = generation(spec.generation).disk_types
    for disk in existing_disks(spec):
        found = compute.find_disk(project, zone, disk.name)
        if found is None:
            raise NotFoundError(f"disk {disk.name} does not exist in {zone} ({project}): a read-only "
                                "disk that is not a clone must exist before the job; give snapshot: or "
                                "source_disk: to clone one")
        if found.type not in takes:
            raise UsageError(f"disk {disk.name} is {found.type}; {spec.accelerator} takes "
                             f"{' or '.join(takes)}: clone it (snapshot: and type:)")
        if found.access_mode == "READ_WRITE_SINGLE":
            raise UsageError(f"disk {disk.name} is a {found.type} disk with access mode "
                             "READ_WRITE_SINGLE, which cannot be attached read-only: clone it "
                             "(snapshot: or source_disk:), tpujob makes clones READ_ONLY_MANY")


def check_disks(compute, spec: ResolvedSpec) -> None:
    """Refuse a disk attached read-only here while a node holds it read-write (the master in
    use on a dev slice): it must be cloned (snapshot + clone) first."""
    project, zone = spec.project, spec.zone
    plain = [d for d in spec.spec.disks if not is_clone(d)]
    if not plain:
        return
    held = {d.source.rsplit("/", 1)[-1]: d.node for d in compute.node_disks(project, zone)
            if not d.read_only}
    for disk in plain:
        if disk.name in held:
            raise UsageError(f"disk {disk.name} is attached read-write to {held[disk.name]}: "
                             f"a disk cannot be attached to two nodes while one writes it; clone it "
                             f"(snapshot: or source_disk: {disk.name} with a new name)")


# ---- at the first attempt: clones; every attempt: the same disks ------------------------------

def data_disks(compute, spec: ResolvedSpec, job_id: int, zone: str) -> tuple[DataDisk, ...]:
    """The node's data disks; makes the clones (and their snapshot) that do not exist yet."""
    project, owner = spec.project, job_labels(job_id)
    out = []
    for disk in spec.spec.disks:
        name, kind = device_name(disk, job_id), spec.disk_types[disk.name]
        found = compute.find_disk(project, zone, name)
        if found is not None and is_clone(disk) and found.labels.get(JOB_LABEL) != format_job_id(job_id):
            raise ConflictError(f"disk {name} exists in {zone} but is not job {format_job_id(job_id)}'s clone "
                                f"(label tpujob-job={found.labels.get(JOB_LABEL, 'none')}): delete "
                                "it or rename the disk in the spec")
        if found is None:
            if disk.source_disk:
                snap = snapshot_name(disk.name, job_id)
                try:
                    compute.get_snapshot(project, snap)
                except NotFoundError:
                    compute.create_snapshot(project, zone, disk.source_disk, snap, labels=owner)
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=snap,
                                    size_gb=disk.size_gb, labels=owner, read_only=True)
            elif disk.snapshot:
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=disk.snapshot,
                                    size_gb=disk.size_gb, labels=owner, read_only=True)
            elif disk.mode == "read-write":  # a new master: formatted by mount_disk.sh
                compute.create_disk(project, zone, name, disk_type=kind, size_gb=disk.size_gb)
            else:
                raise UsageError(f"disk {name} does not exist in {zone}; give snapshot: or "
                                 "source_disk: to clone one")
        out.append(DataDisk(source=f"projects/{project}/zones/{zone}/disks/{name}",
                            read_only=disk.mode == "read-only"))
    return tuple(out)


def attach_missing(compute, spec: ResolvedSpec, job_id: int, zone: str, node: str) -> list[str]:
    """Attach to an existing node the job's disks it lacks (a slice reused by a new attempt
    that was made without one, or lost it to a detach by hand), before they are mounted. What
    was attached, by name."""
    attached = {d.source for d in compute.node_disks(spec.project, zone) if d.node == node}
    done = []
    for disk in data_disks(compute, spec, job_id, zone):
        if disk.source not in attached:
            name = disk.source.rsplit("/", 1)[-1]
            compute.attach_disk(spec.project, zone, node, name, read_only=disk.read_only)
            done.append(name)
    return done


def delete_clones(compute, spec: ResolvedSpec, job_id: int, zones: set[str]) -> list[str]:
    """Delete the job's clones and their snapshots, except those with `keep`; what was deleted.
    Only disks labelled as this job's are deleted."""
    project, deleted = spec.project, []
    for disk in spec.spec.disks:
        if disk.keep or not is_clone(disk):
            continue
        name = clone_name(disk.name, job_id)
        for zone in sorted(zones):
            found = compute.find_disk(project, zone, name)
            if found is not None and found.labels.get(JOB_LABEL) == format_job_id(job_id):
                compute.delete_disk(project, zone, name)
                deleted.append(f"disk {name}")
        if disk.source_disk:
            snap = snapshot_name(disk.name, job_id)
            try:
                compute.get_snapshot(project, snap)
            except NotFoundError:
                continue
            compute.delete_snapshot(project, snap)
            deleted.append(f"snapshot {snap}")
    return deleted


# ---- on the hosts -----------------------------------------------------------------------------

def _mounts(spec: ResolvedSpec, job_id: int) -> list[tuple[str, dict]]:
    steps = []
    for disk in spec.spec.disks:
        steps.append(("mount_disk.sh", {"disk": device_name(disk, job_id), "mount_point": disk.mount,
                                        "read_only": int(disk.mode == "read-only")}))
    buckets = list(spec.spec.buckets)
    location = run_dir_location(spec, job_id)
    if location:  # checkpoints: metadata cache off, every host sees what another wrote
        buckets.append(BucketSpec(bucket=location[0], mount=RUN_DIR_MOUNT, read_only=False,
                                  metadata_ttl_secs=0))
    for bucket in buckets:
        cache_mb = bucket.file_cache_max_size_mb
        steps.append(("mount_bucket.sh", {
            "bucket": bucket.bucket, "mount_point": bucket.mount,
            "read_only": int(bucket.read_only), "metadata_ttl": bucket.metadata_ttl_secs,
            "only_dir": bucket.only_dir or "", "cache_dir": bucket.cache_dir or "",
            "file_cache_mb": "" if cache_mb is None else cache_mb}))
    return steps


def mount_script(spec: ResolvedSpec, job_id: int) -> str | None:
    """One bash script mounting every disk and bucket of the job (None: nothing to mount)."""
    steps = _mounts(spec, job_id)
    if not steps:
        return None
    # Each in a subshell: a script's `exit 0` (already mounted) ends only its own step.
    return "set -e\n" + "\n".join(f"(\n{render(name, **values)}\n)" for name, values in steps)


def unmount_script(spec: ResolvedSpec, job_id: int) -> str | None:
    steps = _mounts(spec, job_id)
    if not steps:
        return None
    return render("unmount.sh", mount_points="\n".join(v["mount_point"] for _, v in reversed(steps)))


# ---- the run dir on GCS, read without SSH ----------------------------------------------------



def _view(url: str, files, since: float, now: float) -> RunDirStatus:
    # A heartbeat from before this attempt began is an earlier attempt's: none yet.
    age = None if files.heartbeat_updated is None or files.heartbeat_updated < since \
        else max(0.0, now - files.heartbeat_updated)
    return RunDirStatus.of(files.status, age, problem=files.status_error, url=url)


def read_run_dirs(gcs, jobs: list[tuple[ResolvedSpec, int, float]], now: float) -> dict[int, RunDirStatus]:
    """[(spec, job id, attempt start)] -> {job id: what its run dir says about this attempt},
    for the jobs whose run dir is on GCS. One list per bucket and parent prefix (Gcs)."""
    wanted: dict[tuple[str, str], float] = {}
    owners: dict[tuple[str, str], int] = {}
    for spec, job_id, since in jobs:
        location = run_dir_location(spec, job_id)
        if location:
            wanted[location] = since
            owners[location] = job_id
    if not wanted:
        return {}
    found = gcs.read_run_dirs(wanted)
    return {owners[loc]: _view(f"gs://{loc[0]}/{loc[1]}", files, wanted[loc], now)
            for loc, files in found.items()}


def read_run_dir(gcs, spec: ResolvedSpec, job_id: int, since: float, now: float) -> RunDirStatus | None:
    """One job's run dir as `show` reports it (None: its run dir is host-local)."""
    return read_run_dirs(gcs, [(spec, job_id, since)], now).get(job_id)


class GcsRunDirs:
    """The sweep's RunDirs (tpujob.reconcile.observe): the current attempt's files of every
    RUNNING job with a run dir on GCS."""

    def __init__(self, settings):
        self.settings = settings
        self._gcs = None

    def read(self, jobs, now: float) -> dict:
        from tpujob.job_spec import spec_of

        specs = [(spec_of(job), job.id, attempt.started_at) for job, attempt in jobs]
        if not any(run_dir_location(spec, job_id) for spec, job_id, _ in specs):
            return {}  # no client (and no import) for jobs whose run dir is host-local
        if self._gcs is None:
            from tpujob.cloud.gcs import Gcs
            from tpujob.service.context import make_storage

            self._gcs = Gcs(make_storage(self.settings))
        views = read_run_dirs(self._gcs, specs, now)
        return {job_id: view for job_id, view in views.items() if not view.problem}


# ---- bucket regions, checked at create --------------------------------------------------------

# Multi-regions and predefined dual-regions (Cloud Storage's bucket locations), by the regions
# they hold: a bucket there is as close to the slice as a regional one.
_MULTI = {"US": ("us-",), "EU": ("europe-",), "ASIA": ("asia-",)}
_DUAL = {"NAM4": ("us-central1", "us-east1"), "EUR4": ("europe-north1", "europe-west4"),
         "ASIA1": ("asia-northeast1", "asia-northeast2")}


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def serves_region(location: str, data_locations: list[str], region: str) -> bool:
    location, region = location.upper(), region.lower()
    if data_locations:  # a custom dual-region lists its two regions
        return region in {d.lower() for d in data_locations}
    if location in _MULTI:
        return region.startswith(_MULTI[location])
    if location in _DUAL:
        return region in _DUAL[location]
    return location.lower() == region


def check_bucket_regions(gcs, spec: ResolvedSpec, strict: bool) -> list[str]:
    """Each bucket the job mounts (and its run dir's) against the slice's region: a warning per
    cross-region bucket, or a UsageError with `strict`. A bucket that does not exist is refused;
    one whose metadata we may not read (storage.buckets.get) is a warning."""
    from tpujob.errors import CloudError

    region = region_of(spec.zone)
    names = [b.bucket for b in spec.spec.buckets]
    location = run_dir_location(spec, 0)
    if location and location[0] not in names:
        names.append(location[0])
    warnings = []
    for name in names:
        try:
            where, data = gcs.bucket_location(name)
        except NotFoundError:
            raise UsageError(f"bucket {name} does not exist") from None
        except CloudError as exc:
            warnings.append(f"could not check the location of bucket {name}: {exc}")
            continue
        if serves_region(where, data, region):
            continue
        message = (f"bucket {name} is in {where}, the slice in {region}: every read and write "
                   "crosses regions (inter-region egress is billed per GB, and latency slows "
                   "checkpoints and data loading); use a bucket in " + region)
        if strict:
            raise UsageError(message + " (refused with --strict)")
        warnings.append(message)
    return warnings
