"""What the host scripts are told of an attempt (hosts/program.HostAttempt): its job and number,
the coordinator, run dir, workdir, the program's env and secrets; and the command it runs.

Pure derivation from the job's spec and the slice: no SSH, no store. SshHostOps
(attempt/hosts.py) builds one per host step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpujob.attempt import run_dirs, runtime_bundle
from tpujob.hosts import program
from tpujob.names import format_job_id, sync_dir
from tpujob.runtime import contract
from tpujob.spec import ResolvedSpec
from tpujob.spec.stored import spec_of

if TYPE_CHECKING:
    from tpujob.cloud.base import Slice
    from tpujob.store.models import Attempt, Job

COORDINATOR_PORT = 8476  # jax.distributed's coordinator on host 0


def build(job: Job, attempt: Attempt, slice_: Slice, user: str, *,
          secrets: dict[str, str] | None = None) -> program.HostAttempt:
    """What the host scripts need, for hosts logged in to as `user`. Secret values only where
    the caller passes them: setup and launch; status, stop, logs and exec run without them (and
    so from cron too)."""
    spec = spec_of(job)
    workdir = spec.spec.run.workdir or (sync_dir(job.id) if spec.sync_path else ".")
    return program.HostAttempt(
        job_id=format_job_id(job.id), attempt=attempt.number,
        coordinator=f"{slice_.hosts[0].ip}:{COORDINATOR_PORT}", slices=attempt.slices,
        max_slices=spec.spec.tpu.max_slices,
        run_dir=run_dirs.host_run_dir_for(spec, job.id, user), workdir=workdir,
        env=program_env(job.cloud, spec.spec.env) | mtbi_env(attempt.reported), secrets=secrets or {},
    )


def mtbi_env(reported: str | None) -> dict[str, str]:
    """`checkpoint_every: auto`: the M recorded on the attempt at its start
    (reconcile/act.py), handed to the runtime; nothing where none was."""
    got = contract.Reported.parse(reported)
    return {} if got is None or got.mtbi is None else {contract.ENV_MTBI_SECONDS: str(int(got.mtbi))}


def program_command(spec: ResolvedSpec, job_id: int) -> str:
    """The command the launch runs: the spec's own, else the bundled runtime's."""
    return spec.spec.run.command or runtime_bundle.run_command(job_id)


def program_env(cloud: str, env: dict[str, str]) -> dict[str, str]:
    """The spec's env, plus JAX_PLATFORMS=tpu on real TPUs (the spec's own value wins): with it
    unset, JAX finding the TPU busy warns and trains on the CPU; with it, it raises (jax 0.10.2
    jax/_src/xla_bridge.py). Not on the emulator's hosts: they have no TPU."""
    return ({"JAX_PLATFORMS": "tpu"} if cloud == "gcp" else {}) | dict(env)
