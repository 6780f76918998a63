"""The sweep's hands on the hosts: sync, setup and launch, status, stop, over SSH.

Host keys come from the cloud (guest attributes) and are verified; logs of every host command
go to $TPUJOB_HOME/logs/JOB/attempt-N/host-K.log.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from tpujob.errors import TpujobError
from tpujob.hosts import program
from tpujob.hosts.fanout import Host, HostGroup
from tpujob.hosts.scripts import as_command
from tpujob.hosts.keys import load_key
from tpujob.reconcile.decide import HostStatus, Program
from tpujob.reconcile.sweep import SetupFailed
from tpujob.service import storage
from tpujob.service import runtime_bundle
from tpujob.store.repository import format_job_id

COORDINATOR_PORT = 8476  # jax.distributed's coordinator on host 0


def ssh_port(settings) -> int:
    if settings.cloud == "local":
        from tpujob.emulator import process

        return int(process.ensure_running()["ssh_port"])
    return 22


class SshHostOps:
    def __init__(self, ctx, cloud):
        self.ctx = ctx
        self.cloud = cloud
        self.user = ctx.settings.ssh_user
        self._port: int | None = None

    # -- plumbing ----------------------------------------------------------------------------
    def group(self, job, attempt, slice_) -> HostGroup:
        if self._port is None:
            self._port = ssh_port(self.ctx.settings)
        keys = self.host_keys(job, attempt, slice_)
        hosts = [Host(h.index, h.external_ip or h.ip, self._port, tuple(keys.get(h.index, ())))
                 for h in slice_.hosts]
        return HostGroup(hosts, self.user, load_key(self.ctx.settings.home))

    def host_keys(self, job, attempt, slice_) -> dict[int, list[str]]:
        """The slice's host keys: from the attempt's record, else from the cloud (then kept,
        once every host has published one, so later sweeps make no API call for them)."""
        if attempt.host_keys:
            return {int(k): v for k, v in json.loads(attempt.host_keys).items()}
        keys = self.cloud.host_keys(job.project, attempt.zone, attempt.slice_name)
        if slice_.hosts and all(keys.get(h.index) for h in slice_.hosts):
            self.ctx.store.record_host_keys(job.id, attempt.number, json.dumps(keys))
        return keys

    def log_dir(self, job, attempt) -> Path:
        path = self.ctx.settings.home / "logs" / format_job_id(job.id) / f"attempt-{attempt.number}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def host_attempt(self, job, attempt, slice_) -> program.Attempt:
        spec = json.loads(job.spec_json)
        run = spec["spec"]["run"]
        jid = format_job_id(job.id)
        home = "/root" if self.user == "root" else f"/home/{self.user}"
        workdir = run.get("workdir") or (f"tpujob-sync/{jid}" if spec.get("sync_path") else ".")
        secrets = {}
        for name in spec["spec"].get("secrets", []):
            if name not in os.environ:
                raise TpujobError(f"secret {name} is not set in this environment")
            secrets[name] = os.environ[name]
        return program.Attempt(
            job_id=jid, attempt=attempt.number,
            coordinator=f"{slice_.hosts[0].ip}:{COORDINATOR_PORT}",
            run_dir=storage.host_run_dir(spec, job.id) or f"{home}/tpujob-runs/{jid}", workdir=workdir,
            env=dict(spec["spec"].get("env", {})), secrets=secrets,
        )

    # -- HostOps -----------------------------------------------------------------------------
    def prepare_and_launch(self, job, attempt, slice_) -> None:
        spec = json.loads(job.spec_json)
        host_attempt = self.host_attempt(job, attempt, slice_)
        logs = self.log_dir(job, attempt)
        log_of = lambda host: logs / f"host-{host.index}.log"  # noqa: E731
        with self.group(job, attempt, slice_) as group:
            if spec.get("sync_path"):
                from tpujob.hosts.sync import sync

                _connection_ok(sync(group, Path(spec["sync_path"]), f"tpujob-sync/{format_job_id(job.id)}"),
                               "sync")
            runtime = spec["spec"]["run"].get("runtime")
            if runtime is not None:  # the bundled runtime travels like user code
                from tpujob.hosts.sync import sync

                jid = format_job_id(job.id)
                bundle = runtime_bundle.build(self.ctx.settings.home, jid, runtime)
                _connection_ok(sync(group, bundle, runtime_bundle.remote_dir(jid)), "runtime upload")
            self.attach_disks(job, attempt)  # a reused slice may lack one: attach before mounting
            mounts = storage.mount_script(spec, job.id)  # disks and buckets, before setup
            if mounts:
                results = group.run(as_command(mounts, "tpujob-mount"), log_paths=log_of, fail_fast=True)
                _connection_ok(results, "mount")
                failed = [r for r in results if not r.ok]
                if failed:
                    raise SetupFailed(f"mounting on host {failed[0].index}: {failed[0].describe()}")
            # The run dir must exist before the program writes its heartbeat there.
            setup = f"mkdir -p {shlex.quote(host_attempt.run_dir)}"
            if runtime is not None:
                setup += "\n" + runtime_bundle.setup_command()
            if spec["spec"].get("setup"):
                setup += "\n" + spec["spec"]["setup"]
            results = program.setup(group, host_attempt, setup, log_paths=log_of)
            _connection_ok(results, "setup")
            failed = [r for r in results if not r.ok]
            if failed:
                raise SetupFailed(f"host {failed[0].index}: {failed[0].describe()}")
            results = program.launch(group, host_attempt, _command(spec, format_job_id(job.id)),
                                     log_paths=log_of)
            _connection_ok(results, "launch")
            failed = [r for r in results if not r.ok]
            if failed:
                raise SetupFailed(f"launch on host {failed[0].index}: {failed[0].describe()}")

    def data_disks(self, job, attempt) -> tuple:
        """The slice's data disks; the first attempt makes the clones, later ones reuse them."""
        spec = json.loads(job.spec_json)
        if not spec["spec"]["disks"]:
            return ()
        from tpujob.service.context import make_compute

        return storage.data_disks(make_compute(self.ctx.settings), spec, job.id, attempt.zone)

    def attach_disks(self, job, attempt) -> None:
        spec = json.loads(job.spec_json)
        if not spec["spec"]["disks"]:
            return
        from tpujob.service.context import make_compute

        for name in storage.attach_missing(make_compute(self.ctx.settings), spec, job.id, attempt.zone,
                                           attempt.slice_name):
            self.ctx.store.add_event(job.id, "disk", f"attached disk {name} to {attempt.slice_name}")

    def program_status(self, job, attempt, slice_) -> tuple[HostStatus, ...]:
        host_attempt = self.host_attempt(job, attempt, slice_)
        try:
            with self.group(job, attempt, slice_) as group:
                statuses = program.status(group, host_attempt, timeout=30)
        except TpujobError:
            return tuple(HostStatus(Program.UNREACHABLE) for _ in slice_.hosts)
        return tuple(_status(s) for s in statuses)

    def stop_program(self, job, attempt, slice_) -> None:
        with self.group(job, attempt, slice_) as group:
            program.stop(group, self.host_attempt(job, attempt, slice_), grace_seconds=30)


def _command(spec: dict, job_id: str) -> str:
    run = spec["spec"]["run"]
    if run.get("command"):
        return run["command"]
    return runtime_bundle.run_command(job_id)


def _status(s) -> HostStatus:
    if s.state == "running":
        return HostStatus(Program.RUNNING, step=s.step, resumed_from=s.resumed_from)
    if s.state == "exited":
        return HostStatus(Program.EXITED, s.exit_code, step=s.step, resumed_from=s.resumed_from)
    if s.state == "unreachable":
        return HostStatus(Program.UNREACHABLE)
    return HostStatus(Program.MISSING)  # absent or lost: no program where one was launched


def _connection_ok(results, what: str) -> None:
    """A host that could not be reached is not a setup failure: the sweep retries later."""
    for r in results:
        if r.exit_code is None:
            raise TpujobError(f"{what} on host {r.index}: {r.describe()}")
