"""Every name tpujob derives from a job: its id as shown, its cloud resources, its directories on
the hosts (its run dir's: attempt/run_dirs.py), and the labels that tie cloud resources back to it. Derived, never
random: a retried create of the same attempt finds and adopts what the first try made, and
`tpujob gc` tells a job's resources by their labels. Pure, and imports nothing (`list` renders ids).

Every cloud resource name carries the store's tag (`store_tag`: the first 6 hex digits of the
store's id, store/identity.py): two stores in one project (two labs, a test store and a real one)
each have a job 1, and without the tag both would ask for `tpujob-000001-1`, the second adopting
the first's slice (or clone, template, disk) through the already-exists path. Names stay within
Google's rules: a Compute Engine name (disk, snapshot, instance, template, MIG, resource policy)
is 1-63 characters matching `[a-z]([-a-z0-9]*[a-z0-9])?` (RFC 1035; compute.v1's `name` fields,
as google-cloud-java's DiskId documents it:
https://googleapis.dev/java/google-cloud-clients/0.92.0-alpha/com/google/cloud/compute/deprecated/DiskId.html),
and a TPU node id follows `^[A-Za-z0-9_.+%-]+$` (google.cloud.tpu_v2alpha1
QueuedResource.Tpu.NodeSpec.node_id), which every RFC 1035 name meets.
"""

from __future__ import annotations

import re

# Labels on every queued resource, node, disk and snapshot a job creates (`tpujob gc` reads them).
JOB_LABEL = "tpujob-job"  # the job id, format_job_id
STORE_LABEL = "tpujob-store"  # the store's id (store/identity.py): two stores in one project
ATTEMPT_LABEL = "tpujob-attempt"  # on slices: the attempt number

# Where the run dir's bucket is mounted on every host (`run_dir: gs://...`).
RUN_DIR_MOUNT = "/mnt/tpujob-run"


STORE_TAG_LENGTH = 6
# A slice's name: tpujob-TAG-JOBID-ATTEMPT (slice_name; tpujob-JOBID-ATTEMPT before names carried
# the tag: `store` is then None); a workload policy, which carries no labels (compute.v1
# ResourcePolicy), is told as tpujob's, and whose, by it alone (cloud/compute_tpu.py, gc).
SLICE_NAME = re.compile(r"^tpujob-(?:(?P<store>[0-9a-f]{6})-)?(?P<job>\d{6,})-(?P<attempt>\d+)$")


def store_tag(store_id: str) -> str:
    """The store's tag in every resource name: its id's first 6 hex digits (16.7 million tags:
    two stores of one project sharing one is a 1 in 16.7 million chance)."""
    return store_id[:STORE_TAG_LENGTH]


def format_job_id(job_id: int) -> str:
    """The id as every command, file name and label shows it: `000042`."""
    return f"{job_id:06d}"


def slice_name(job_id: int, attempt: int, store: str) -> str:
    """The node of an attempt, and its queued resource (same name), of the store tagged `store`
    (store_tag): `tpujob-3f9a0c-000042-3`. 22 characters (job ids past 999999 add digits), so
    a multislice node's `-K` and a MIG's VM suffix (`-xxxx`) stay within 63."""
    return f"tpujob-{store}-{format_job_id(job_id)}-{attempt}"


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


# What a clone's name adds to its disk's: `-TAG-JOBID` (14 characters); its snapshot's:
# `-src-TAG-JOBID` (18). A cloned disk's name may have 63 - 18 = 45 (spec/resolution.py).
CLONE_NAME_ROOM = 63 - len("-src--") - STORE_TAG_LENGTH - len(format_job_id(0))


def clone_name(disk_name: str, job_id: int, store: str) -> str:
    """The job's own clone of a disk, in the store tagged `store`: a second job from the same
    spec, or another store's job of the same id, must not adopt (and later delete) the first
    one's."""
    return f"{disk_name}-{store}-{format_job_id(job_id)}"


def snapshot_name(disk_name: str, job_id: int, store: str) -> str:
    """The snapshot a `source_disk` clone is made from."""
    return f"{disk_name}-src-{store}-{format_job_id(job_id)}"



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
