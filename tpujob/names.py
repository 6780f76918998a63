"""Every name tpujob derives from a job: its id as shown, its cloud resources, its directories on
the hosts (its run dir's: attempt/run_dirs.py), and the labels that tie cloud resources back to it. Derived, never
random: a retried create of the same attempt finds and adopts what the first try made, and
`tpujob gc` tells a job's resources by their labels. Pure, and imports nothing (`list` renders ids).
"""

from __future__ import annotations

import re

# Labels on every queued resource, node, disk and snapshot a job creates (`tpujob gc` reads them).
JOB_LABEL = "tpujob-job"  # the job id, format_job_id
STORE_LABEL = "tpujob-store"  # the store's id (store/identity.py): two stores in one project
ATTEMPT_LABEL = "tpujob-attempt"  # on slices: the attempt number

# Where the run dir's bucket is mounted on every host (`run_dir: gs://...`).
RUN_DIR_MOUNT = "/mnt/tpujob-run"


def format_job_id(job_id: int) -> str:
    """The id as every command, file name and label shows it: `000042`."""
    return f"{job_id:06d}"


def slice_name(job_id: int, attempt: int) -> str:
    """The node of an attempt, and its queued resource (same name): `tpujob-000042-3`."""
    return f"tpujob-{format_job_id(job_id)}-{attempt}"


def node_names(name: str, slices: int) -> list[str]:
    """The node ids of an attempt's slice(s): the name itself for one slice; of several, as
    Google names a multislice queued resource's nodes (tpujob.cloud.multislice)."""
    return [name] if slices == 1 else [f"{name}-{k}" for k in range(slices)]


def attempt_nodes(attempt) -> list[str]:
    """The nodes an attempt trains on: its own list (an elastic attempt's: slices kept from the
    attempt before, then grown ones), else NAME-0..N-1."""
    return attempt.nodes.split() if attempt.nodes else node_names(attempt.slice_name, attempt.slices)


def own_nodes(attempt) -> tuple[str, ...]:
    """An elastic attempt's own node list, for the cloud calls (empty: NAME-0..N-1)."""
    return tuple(attempt.nodes.split()) if attempt.nodes else ()


def nodes_to_delete(attempt) -> tuple[str, ...]:
    """What deleting an attempt's slice deletes, for the cloud calls: an elastic attempt's own
    nodes and those being grown for it (empty: NAME-0..N-1 and its queued resource)."""
    if not (attempt.nodes or attempt.growing):
        return ()
    return tuple(dict.fromkeys([*attempt_nodes(attempt), *growing_nodes(attempt)]))


def growing_state(attempt) -> dict:
    """An elastic attempt's growing back (store JSON): {"nodes": {node: create operation}}
    while asked for, {"failed_at": epoch} after a try failed, {} when none."""
    if not attempt.growing:
        return {}
    import json

    return json.loads(attempt.growing)


def growing_nodes(attempt) -> list[str]:
    """The nodes being created to grow an elastic attempt back to its slices."""
    return list(growing_state(attempt).get("nodes", {}))


def nodes_text(name: str, slices: int) -> str:
    """The nodes as people read them: `NAME`, or `NAME-0..N-1`."""
    return name if slices == 1 else f"{name}-0..{slices - 1}"


def clone_name(disk_name: str, job_id: int) -> str:
    """The job's own clone of a disk: a second job from the same spec must not adopt (and later
    delete) the first one's."""
    return f"{disk_name}-{format_job_id(job_id)}"


def snapshot_name(disk_name: str, job_id: int) -> str:
    """The snapshot a `source_disk` clone is made from."""
    return f"{disk_name}-src-{format_job_id(job_id)}"


def slice_labels(job_id: int, attempt: int) -> dict[str, str]:
    return {JOB_LABEL: format_job_id(job_id), ATTEMPT_LABEL: str(attempt)}


def job_labels(job_id: int) -> dict[str, str]:
    """On a job's disk clones and snapshots."""
    return {JOB_LABEL: format_job_id(job_id)}


# ---- on the hosts (paths relative to the SSH user's home unless absolute) ----------------------

def sync_dir(job_id: int) -> str:
    """Where the spec's `sync` directory lands, and the program's default working directory."""
    return f"tpujob-sync/{format_job_id(job_id)}"


def runtime_bundle_dir(job_id: int) -> str:
    """Where the bundled runtime (tpujob/runtime and its config) is synced."""
    return f"tpujob-runtime/{format_job_id(job_id)}"


def host_job_dir(job_id: int | str) -> str:
    """tpujob's own state on a host: pid files, logs per attempt. `job_id` is the number or the
    id as TPUJOB_JOB_ID carries it (format_job_id's)."""
    return f".tpujob/jobs/{job_id if isinstance(job_id, str) else format_job_id(job_id)}"


def split_gs(url: str) -> tuple[str, str] | None:
    """gs://BUCKET/PREFIX -> (BUCKET, PREFIX without slashes at its ends); None if not gs://.
    The one reading of a gs:// location: the spec's check of `run_dir`, the run dir, the setup
    cache's bucket."""
    match = re.fullmatch(r"gs://([^/]+)/?(.*)", url)
    return (match.group(1), match.group(2).strip("/")) if match else None


# ---- on this machine, under $TPUJOB_HOME --------------------------------------------------------

def local_job_dir(job_id: int) -> str:
    """jobs/JOBID: the runtime bundle built for the hosts."""
    return f"jobs/{format_job_id(job_id)}"


def local_log_dir(job_id: int, attempt: int | None = None) -> str:
    """logs/JOBID[/attempt-N]: each host's setup and launch output (host-K.log), per attempt."""
    return f"logs/{format_job_id(job_id)}" + (f"/attempt-{attempt}" if attempt is not None else "")
