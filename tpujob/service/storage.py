"""A job's storage: its disks (clone and scale), its buckets, its run dir on GCS.

Clone and scale: a disk with `source_disk` is snapshotted (`NAME-src-JOBID`) and cloned as
NAME; a disk with `snapshot` is cloned from it. The clone is made by the first attempt and
reused by every later one (a re-queued run sees the data the first attempt saw), then deleted
with the job unless `keep`. The host side mounts every disk and bucket before setup.
"""

from __future__ import annotations

import re

from tpujob.cloud.base import DataDisk
from tpujob.errors import NotFoundError, UsageError
from tpujob.hosts.scripts import render

RUN_DIR_MOUNT = "/mnt/tpujob-run"  # where the run dir's bucket is mounted on every host


def _jid(job_id: int) -> str:
    return f"{job_id:06d}"


def snapshot_name(disk_name: str, job_id: int) -> str:
    return f"{disk_name}-src-{_jid(job_id)}"


def run_dir_location(spec: dict, job_id: int) -> tuple[str, str] | None:
    """(bucket, object prefix of the job's run dir) when the spec sets `run_dir: gs://...`."""
    run_dir = spec["spec"].get("run_dir")
    if not run_dir:
        return None
    match = re.match(r"^gs://([^/]+)/?(.*)$", run_dir)
    prefix = match.group(2).strip("/")
    return match.group(1), f"{prefix}/{_jid(job_id)}" if prefix else _jid(job_id)


def host_run_dir(spec: dict, job_id: int) -> str | None:
    """TPUJOB_RUN_DIR on the hosts when the run dir is on GCS (mounted at RUN_DIR_MOUNT)."""
    location = run_dir_location(spec, job_id)
    return f"{RUN_DIR_MOUNT}/{location[1]}" if location else None


# ---- before anything is spent -----------------------------------------------------------------

def check_disks(compute, spec: dict) -> None:
    """Refuse a disk attached read-only here while a node holds it read-write (the master in
    use on a dev slice): it must be cloned (snapshot + clone) first."""
    project, zone = spec["project"], spec["zone"]
    plain = [d for d in spec["spec"]["disks"] if not d.get("source_disk") and not d.get("snapshot")]
    if not plain:
        return
    held = {d.source.rsplit("/", 1)[-1]: d.node for d in compute.node_disks(project, zone)
            if not d.read_only}
    for disk in plain:
        if disk["name"] in held:
            raise UsageError(f"disk {disk['name']} is attached read-write to {held[disk['name']]}: "
                             f"a disk cannot be attached to two nodes while one writes it; clone it "
                             f"(snapshot: or source_disk: {disk['name']} with a new name)")


# ---- at the first attempt: clones; every attempt: the same disks ------------------------------

def data_disks(compute, spec: dict, job_id: int, zone: str) -> tuple[DataDisk, ...]:
    """The node's data disks; makes the clones (and their snapshot) that do not exist yet."""
    project = spec["project"]
    out = []
    for disk in spec["spec"]["disks"]:
        name, kind = disk["name"], spec["disk_types"][disk["name"]]
        if compute.find_disk(project, zone, name) is None:
            if disk.get("source_disk"):
                snap = snapshot_name(name, job_id)
                try:
                    compute.get_snapshot(project, snap)
                except NotFoundError:
                    compute.create_snapshot(project, zone, disk["source_disk"], snap,
                                            labels={"tpujob-job": _jid(job_id)})
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=snap,
                                    size_gb=disk.get("size_gb"), labels={"tpujob-job": _jid(job_id)})
            elif disk.get("snapshot"):
                compute.create_disk(project, zone, name, disk_type=kind, snapshot=disk["snapshot"],
                                    size_gb=disk.get("size_gb"), labels={"tpujob-job": _jid(job_id)})
            elif disk["mode"] == "read-write":  # a new master: formatted by mount_disk.sh
                compute.create_disk(project, zone, name, disk_type=kind, size_gb=disk.get("size_gb"))
            else:
                raise UsageError(f"disk {name} does not exist in {zone}; give snapshot: or "
                                 "source_disk: to clone one")
        out.append(DataDisk(source=f"projects/{project}/zones/{zone}/disks/{name}",
                            read_only=disk["mode"] == "read-only"))
    return tuple(out)


def delete_clones(compute, spec: dict, job_id: int, zones: set[str]) -> list[str]:
    """Delete the job's clones and their snapshots, except those with `keep`; what was deleted."""
    project, deleted = spec["project"], []
    for disk in spec["spec"]["disks"]:
        if disk.get("keep") or not (disk.get("source_disk") or disk.get("snapshot")):
            continue
        for zone in sorted(zones):
            if compute.find_disk(project, zone, disk["name"]) is not None:
                compute.delete_disk(project, zone, disk["name"])
                deleted.append(f"disk {disk['name']}")
        if disk.get("source_disk"):
            try:
                compute.get_snapshot(project, snapshot_name(disk["name"], job_id))
            except NotFoundError:
                continue
            compute.delete_snapshot(project, snapshot_name(disk["name"], job_id))
            deleted.append(f"snapshot {snapshot_name(disk['name'], job_id)}")
    return deleted


# ---- on the hosts -----------------------------------------------------------------------------

def _mounts(spec: dict, job_id: int) -> list[tuple[str, dict]]:
    steps = []
    for disk in spec["spec"]["disks"]:
        steps.append(("mount_disk.sh", {"disk": disk["name"], "mount_point": disk["mount"],
                                        "read_only": int(disk["mode"] == "read-only")}))
    buckets = list(spec["spec"]["buckets"])
    location = run_dir_location(spec, job_id)
    if location:  # checkpoints: metadata cache off, every host sees what another wrote
        buckets.append({"bucket": location[0], "mount": RUN_DIR_MOUNT, "read_only": False,
                        "metadata_ttl_secs": 0, "only_dir": None})
    for bucket in buckets:
        steps.append(("mount_bucket.sh", {
            "bucket": bucket["bucket"], "mount_point": bucket["mount"],
            "read_only": int(bucket["read_only"]), "metadata_ttl": bucket["metadata_ttl_secs"],
            "only_dir": bucket.get("only_dir") or ""}))
    return steps


def mount_script(spec: dict, job_id: int) -> str | None:
    """One bash script mounting every disk and bucket of the job (None: nothing to mount)."""
    steps = _mounts(spec, job_id)
    if not steps:
        return None
    # Each in a subshell: a script's `exit 0` (already mounted) ends only its own step.
    return "set -e\n" + "\n".join(f"(\n{render(name, **values)}\n)" for name, values in steps)


def unmount_script(spec: dict, job_id: int) -> str | None:
    steps = _mounts(spec, job_id)
    if not steps:
        return None
    return render("unmount.sh", mount_points="\n".join(v["mount_point"] for _, v in reversed(steps)))
