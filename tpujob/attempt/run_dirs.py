"""A job's run dir: where it is (`run_dir: gs://BUCKET/PREFIX` -> gs://BUCKET/PREFIX/JOBID, mounted
on every host; else a directory on each host), and what it says about the current attempt,
read through google-cloud-storage so the sweep and `show` know how the program is doing
without SSH (contract.RunDirStatus)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpujob.names import RUN_DIR_MOUNT, format_job_id, split_gs
from tpujob.runtime.contract import RunDirStatus
from tpujob.spec import ResolvedSpec

if TYPE_CHECKING:  # google-cloud-storage is slow to import: only where a client is made
    from tpujob.cloud.gcs import Gcs, RunFiles
    from tpujob.settings import Settings
    from tpujob.store.models import Attempt, Job


def run_dir_location(spec: ResolvedSpec, job_id: int) -> tuple[str, str] | None:
    """(bucket, object prefix of the job's run dir) when the spec sets `run_dir: gs://...`."""
    run_dir = spec.spec.run_dir
    if not run_dir:
        return None
    parts = split_gs(run_dir)
    if parts is None:  # the spec's validation allows gs:// only
        raise ValueError(f"run_dir is not a gs:// location: {run_dir!r}")
    bucket, prefix = parts
    return bucket, f"{prefix}/{format_job_id(job_id)}" if prefix else format_job_id(job_id)


def host_run_dir(spec: ResolvedSpec, job_id: int) -> str | None:
    """TPUJOB_RUN_DIR on the hosts when the run dir is on GCS (mounted at RUN_DIR_MOUNT)."""
    location = run_dir_location(spec, job_id)
    return f"{RUN_DIR_MOUNT}/{location[1]}" if location else None


def host_run_dir_for(spec: ResolvedSpec, job_id: int, ssh_user: str) -> str:
    """TPUJOB_RUN_DIR on the hosts: on GCS when the spec says so, else host-local (on each
    host, gone with the slice)."""
    home = "/root" if ssh_user == "root" else f"/home/{ssh_user}"
    return host_run_dir(spec, job_id) or f"{home}/tpujob-runs/{format_job_id(job_id)}"




def _view(url: str, files: RunFiles, since: float, now: float) -> RunDirStatus:
    # A heartbeat from before this attempt began is an earlier attempt's: none yet.
    age = None if files.heartbeat_updated is None or files.heartbeat_updated < since \
        else max(0.0, now - files.heartbeat_updated)
    return RunDirStatus.of(files.status, age, problem=files.status_error, url=url)


def read_run_dirs(gcs: Gcs, jobs: list[tuple[ResolvedSpec, int, float]], now: float) -> dict[int, RunDirStatus]:
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


def read_run_dir(gcs: Gcs, spec: ResolvedSpec, job_id: int, since: float, now: float) -> RunDirStatus | None:
    """One job's run dir as `show` reports it (None: its run dir is host-local)."""
    return read_run_dirs(gcs, [(spec, job_id, since)], now).get(job_id)


class GcsRunDirs:
    """The sweep's RunDirs (tpujob.reconcile.observe): the current attempt's files of every
    RUNNING job with a run dir on GCS."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._gcs: Gcs | None = None

    def read(self, jobs: list[tuple[Job, Attempt]], now: float) -> dict[int, RunDirStatus]:
        """`now`, the sweep's clock, is not what a heartbeat is aged on: its `updated` is the
        storage service's time, and so is the age's other end (Gcs.now)."""
        from tpujob.spec.stored import spec_of

        specs = [(spec_of(job), job.id, attempt.started_at) for job, attempt in jobs]
        if not any(run_dir_location(spec, job_id) for spec, job_id, _ in specs):
            return {}  # no client (and no import) for jobs whose run dir is host-local
        if self._gcs is None:
            from tpujob.clients import make_storage
            from tpujob.cloud.gcs import Gcs

            self._gcs = Gcs(make_storage(self.settings))
        views = read_run_dirs(self._gcs, specs, self._gcs.now())
        return {job_id: view for job_id, view in views.items() if not view.problem}
