"""Mounting a job's disks and buckets (its run dir's bucket included) on every host, before
setup, and unmounting them: one script each, rendered from templates/."""

from __future__ import annotations

from typing import Any

from tpujob.attempt.run_dirs import run_dir_location
from tpujob.attempt.slice_disks import device_name
from tpujob.hosts.scripts import render
from tpujob.names import RUN_DIR_MOUNT
from tpujob.spec import BucketSpec, ResolvedSpec


def _mounts(spec: ResolvedSpec, job_id: int, store: str) -> list[tuple[str, dict[str, Any]]]:
    steps: list[tuple[str, dict[str, Any]]] = []
    for disk in spec.spec.disks:
        steps.append(("mount_disk.sh", {"disk": device_name(disk, job_id, store), "mount_point": disk.mount,
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


def mount_script(spec: ResolvedSpec, job_id: int, store: str) -> str | None:
    """One bash script mounting every disk and bucket of the job (None: nothing to mount);
    `store`: the store's tag, in the clones' names (tpujob/names.py)."""
    steps = _mounts(spec, job_id, store)
    if not steps:
        return None
    # Each in a subshell: a script's `exit 0` (already mounted) ends only its own step.
    return "set -e\n" + "\n".join(f"(\n{render(name, **values)}\n)" for name, values in steps)


def unmount_script(spec: ResolvedSpec, job_id: int, store: str) -> str | None:
    steps = _mounts(spec, job_id, store)
    if not steps:
        return None
    return render("unmount.sh", mount_points="\n".join(v["mount_point"] for _, v in reversed(steps)))
