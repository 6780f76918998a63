"""A job's disks: made for its slice, checked on it, deleted with the job.

Clone and scale: a disk with `source_disk` is snapshotted (`NAME-src-TAG-JOBID`, TAG the store's:
tpujob/names.py) and cloned as `NAME-TAG-JOBID`; a disk with `snapshot` is cloned from it. The
clone belongs to its job (named after it and labelled `tpujob-job: JOBID`: tpujob/names.py): two
jobs from one spec, or two stores' jobs of one id, get a clone each. It is made by the first
attempt and reused by every later one (a re-queued run sees the data the first attempt saw),
then deleted with the job unless `keep`. `tpujob disk ...` snapshots and clones by hand
(service/disks.py): the dev-slice side of the same workflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpujob.catalogue import COMPUTE
from tpujob.cloud.base import DataDisk
from tpujob.errors import ConflictError, NotFoundError, SetupFailed, UsageError
from tpujob.names import (
    JOB_LABEL,
    STORE_LABEL,
    clone_name,
    format_job_id,
    job_labels,
    node_names,
    own_nodes,
    snapshot_name,
    store_tag,
)
from tpujob.spec import DiskSpec, ResolvedSpec
from tpujob.spec.stored import spec_of

if TYPE_CHECKING:
    from tpujob.cloud.base import Slice
    from tpujob.cloud.disks import GcpCompute
    from tpujob.settings import Settings
    from tpujob.store.models import Attempt, Job


def is_clone(disk: DiskSpec) -> bool:
    return bool(disk.source_disk or disk.snapshot)


def device_name(disk: DiskSpec, job_id: int, store: str) -> str:
    """The name the disk has in the cloud, hence on the hosts (/dev/disk/by-id/google-NAME);
    `store`: the store's tag (names.store_tag), in a clone's name."""
    return clone_name(disk.name, job_id, store) if is_clone(disk) else disk.name


def tag_of(settings: Settings) -> str:
    """This store's tag, from the label every resource it makes carries (clients.store_labels)."""
    from tpujob.clients import store_labels

    return store_tag(store_labels(settings)[STORE_LABEL])


# ---- before anything is spent -----------------------------------------------------------------

def existing_disks(spec: ResolvedSpec) -> list[DiskSpec]:
    """The disks that must exist before the job: read-only and not a clone (tpujob would make
    an empty disk, which read-only holds nothing and can never be written)."""
    return [d for d in spec.spec.disks if d.mode == "read-only" and not is_clone(d)]


def sourced_disks(spec: ResolvedSpec) -> list[DiskSpec]:
    """The disks whose data must exist before the job: those not cloned, read-only, and the
    clones' sources (a snapshot, or the master disk to snapshot)."""
    return existing_disks(spec) + [d for d in spec.spec.disks if is_clone(d)]


def check_existing_disks(compute: GcpCompute, spec: ResolvedSpec) -> None:
    """One Compute get per disk of `sourced_disks`: a missing disk or snapshot is NotFoundError
    (exit 3) naming the command that makes it; a type the generation does not take, or a
    Hyperdisk not made for read-only use, is UsageError (the attach would be refused)."""
    from tpujob.catalogue import generation

    project, zone = spec.project, spec.zone
    takes = generation(spec.generation).disk_types
    for disk in spec.spec.disks:
        if disk.snapshot:
            _check_snapshot(compute, project, zone, disk, disk.snapshot)
        elif disk.source_disk and compute.find_disk(project, zone, disk.source_disk) is None:
            raise NotFoundError(f"disk {disk.source_disk} (source_disk of {disk.name}) does not exist in "
                                f"{zone} ({project}): make it read-write on a single-host dev slice (a "
                                "missing master is created empty there, docs/storage.md), or name the disk "
                                "that holds the data")
    for disk in existing_disks(spec):
        found = compute.find_disk(project, zone, disk.name)
        if found is None:
            raise NotFoundError(f"disk {disk.name} does not exist in {zone} ({project}): a read-only "
                                "disk that is not a clone must exist before the job; create it from a "
                                f"snapshot with `tpujob disk clone SNAPSHOT --name {disk.name} --zone {zone}`, "
                                "or give snapshot: or source_disk: to clone one")
        if found.type not in takes:
            raise UsageError(f"disk {disk.name} is {found.type}; {spec.accelerator} takes "
                             f"{' or '.join(takes)}: clone it (snapshot: and type:)")
        if found.access_mode == "READ_WRITE_SINGLE":
            raise UsageError(f"disk {disk.name} is a {found.type} disk with access mode "
                             "READ_WRITE_SINGLE, which cannot be attached read-only: clone it "
                             "(snapshot: or source_disk:), tpujob makes clones READ_ONLY_MANY")


def _check_snapshot(compute: GcpCompute, project: str, zone: str, disk: DiskSpec, snapshot: str) -> None:
    try:
        compute.get_snapshot(project, snapshot)
    except NotFoundError:
        raise NotFoundError(f"snapshot {disk.snapshot} (the source of disk {disk.name}) does not exist "
                            f"in {project}: make it from the disk holding the data with `tpujob disk "
                            f"snapshot DISK --name {disk.snapshot} --zone {zone}`") from None


def check_disks(compute: GcpCompute, spec: ResolvedSpec) -> None:
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

def data_disks(compute: GcpCompute, spec: ResolvedSpec, job_id: int, zone: str, store: str) -> tuple[DataDisk, ...]:
    """The node's data disks; makes the clones (and their snapshot) that do not exist yet.
    `store`: the store's tag, in the clones' names."""
    project, owner = spec.project, job_labels(job_id)
    out = []
    for disk in spec.spec.disks:
        name, kind = device_name(disk, job_id, store), spec.disk_types[disk.name]
        found = compute.find_disk(project, zone, name)
        if found is not None and is_clone(disk) and found.labels.get(JOB_LABEL) != format_job_id(job_id):
            raise ConflictError(f"disk {name} exists in {zone} but is not job {format_job_id(job_id)}'s clone "
                                f"(label tpujob-job={found.labels.get(JOB_LABEL, 'none')}): delete "
                                "it or rename the disk in the spec")
        if found is None:
            if disk.source_disk:
                snap = snapshot_name(disk.name, job_id, store)
                try:
                    compute.get_snapshot(project, snap)
                except NotFoundError:
                    # The master lives in the primary zone; the snapshot is global, so a
                    # fallback zone's clone comes from it too.
                    compute.create_snapshot(project, spec.zone, disk.source_disk, snap, labels=owner)
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=snap,
                                    size_gb=disk.size_gb, labels=owner, read_only=True)
            elif disk.snapshot:
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=disk.snapshot,
                                    size_gb=disk.size_gb, labels=owner, read_only=True)
            elif zone != spec.zone:
                # Never an empty disk in place of the data disk: a zonal disk does not move
                # (validate refuses such a fallback zone; a spec stored before it did lands here).
                raise UsageError(f"disk {name} is in {spec.zone} and cannot be attached in {zone}; "
                                 "clone it (snapshot: or source_disk:) to use a fallback zone")
            elif disk.mode == "read-write":  # a new master: formatted by mount_disk.sh
                compute.create_disk(project, zone, name, disk_type=kind, size_gb=disk.size_gb)
            else:
                raise UsageError(f"disk {name} does not exist in {zone}; give snapshot: or "
                                 "source_disk: to clone one")
        out.append(DataDisk(source=f"projects/{project}/zones/{zone}/disks/{name}",
                            read_only=disk.mode == "read-only"))
    return tuple(out)


def missing_disks(compute: GcpCompute, spec: ResolvedSpec, job_id: int, zone: str, store: str, node: str,
                  slices: int = 1, nodes: tuple[str, ...] = ()) -> list[str]:
    """The job's disks an existing node lacks (a slice reused by a new attempt that lost one to a
    detach by hand), by name; of several slices, the disks any of their nodes lacks. They cannot
    be added: Google's v2 UpdateNode documents no `data_disks` in its mask (tpu.v2.json
    nodes.patch), so disks are attached at create only. `nodes`: an elastic attempt's own."""
    attached: dict[str, set[str]] = {n: set() for n in (nodes or node_names(node, slices))}
    for d in compute.node_disks(spec.project, zone):
        if d.node in attached:
            attached[d.node].add(d.source)
    return [d.source.rsplit("/", 1)[-1] for d in data_disks(compute, spec, job_id, zone, store)
            if any(d.source not in found for found in attached.values())]


def missing_from(compute: GcpCompute, spec: ResolvedSpec, job_id: int, zone: str, store: str,
                 held: tuple[str, ...]) -> list[str]:
    """The job's disks a Compute Engine slice lacks, by name, from the short names of the disks
    every one of its VMs holds (the observed Slice.data_disks)."""
    wanted = [d.source.rsplit("/", 1)[-1] for d in data_disks(compute, spec, job_id, zone, store)]
    return [name for name in wanted if name not in held]


# ---- an attempt's slice: the disks it is asked with, then checked on it before mounting -------

def attempt_disks(settings: Settings, job: Job, attempt: Attempt) -> tuple[DataDisk, ...]:
    """The slice's data disks; the first attempt makes the clones, later ones reuse them."""
    spec = spec_of(job)
    if not spec.spec.disks:
        return ()
    from tpujob.clients import make_compute

    return data_disks(make_compute(settings), spec, job.id, attempt.zone, tag_of(settings))


def ensure_on_slice(settings: Settings, job: Job, attempt: Attempt, slice_: Slice) -> None:
    """SetupFailed when the slice lacks one of the job's disks: Google attaches disks to a
    TPU node at create only (v2's UpdateNode documents no `data_disks`); a Compute Engine
    slice's observation says which disks every VM holds (tpujob attaches them at create)."""
    spec = spec_of(job)
    if not spec.spec.disks:
        return
    from tpujob.clients import make_compute

    compute = make_compute(settings)
    if spec.api == COMPUTE:
        missing = missing_from(compute, spec, job.id, attempt.zone, tag_of(settings), slice_.data_disks)
    else:
        missing = missing_disks(compute, spec, job.id, attempt.zone, tag_of(settings),
                                attempt.slice_name, attempt.slices, own_nodes(attempt))
    if missing:
        raise SetupFailed(f"slice {attempt.slice_name} lacks disk {', '.join(missing)} (detached by "
                          "hand?): disks are attached only when the slice is created; delete the "
                          "slice and the next attempt creates it with its disks")


def delete_clones(compute: GcpCompute, spec: ResolvedSpec, job_id: int, zones: set[str], store: str) -> list[str]:
    """Delete the job's clones and their snapshots, except those with `keep`; what was deleted.
    Only disks labelled as this job's are deleted. `store`: the store's tag."""
    project, deleted = spec.project, []
    for disk in spec.spec.disks:
        if disk.keep or not is_clone(disk):
            continue
        name = clone_name(disk.name, job_id, store)
        for zone in sorted(zones):
            found = compute.find_disk(project, zone, name)
            if found is not None and found.labels.get(JOB_LABEL) == format_job_id(job_id):
                compute.delete_disk(project, zone, name)
                deleted.append(f"disk {name}")
        if disk.source_disk:
            snap = snapshot_name(disk.name, job_id, store)
            try:
                compute.get_snapshot(project, snap)
            except NotFoundError:
                continue
            compute.delete_snapshot(project, snap)
            deleted.append(f"snapshot {snap}")
    return deleted
