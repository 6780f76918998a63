"""The sweep's hands on the hosts: sync, setup and launch, status, stop, over SSH.

The host keys it verifies are attempt.host_keys's; the disks it checks, attempt.slice_disks's.
Logs of every host command go to $TPUJOB_HOME/logs/JOB/attempt-N/host-K.log.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from tpujob.attempt import (
    host_answers,
    host_attempts,
    host_keys,
    mounts,
    runtime_bundle,
    secrets,
    setup_cache,
    setup_states,
)
from tpujob.attempt import slice_disks as disks
from tpujob.errors import ConfigError, HostsUnreachable, LocalIOError, SetupFailed, SshAuthRefused, TpujobError
from tpujob.hosts import program
from tpujob.hosts.fanout import Host, HostGroup, Progress, ensure_ok
from tpujob.hosts.keys import load_key
from tpujob.hosts.scripts import as_command
from tpujob.names import attempt_nodes, local_log_dir, runtime_bundle_dir, sync_dir
from tpujob.reconcile.observation import HostObservation, Program, Setup, SetupSeen
from tpujob.reconcile.policy import policy_of
from tpujob.settings import private_dir
from tpujob.spec import ResolvedSpec
from tpujob.spec.stored import api_of, spec_of

if TYPE_CHECKING:
    from tpujob.attempt import StoreContext
    from tpujob.attempt.logins import Login, Logins
    from tpujob.cloud.base import Cloud, DataDisk, Slice
    from tpujob.settings import Settings
    from tpujob.store.models import Attempt, Job

STACKS_FILE = "stacks.txt"  # a hung attempt's stacks, in its local log dir
SYNC_TIMEOUT = 600.0     # per host, for an upload of the code or the runtime
LAUNCH_TIMEOUT = 120.0   # per host; the launch returns once the program started


def external_ips(job: Job) -> bool:
    """Whether tpujob reaches the job's hosts on their external addresses (tpu.network)."""
    return spec_of(job).spec.tpu.network.external_ips


def ssh_port(settings: Settings) -> int:
    if settings.cloud == "local":
        from tpujob.emulator import process

        return int(process.ensure_running()["ssh_port"])
    return 22


ProgressSink = Callable[[str, Progress], None]   # (step name, where the fan-out is)


class SshHostOps:
    """`progress`, when given, hears each host step (sync, mount, setup, launch) as hosts
    finish it; `actor` is the lease holder the sweep acts as: before each host step it checks
    that the job is still its own (the sweep's lease keeper renews it throughout), so that no
    two sweeps run setup on the same hosts. Should the sweep die in a step, the step may go on
    on the hosts: setup.sh's lock makes the next sweep's setup of that attempt wait for it.
    `lease_seconds` (with `actor`) is the TTL the sweep holds its leases for."""

    def __init__(self, ctx: StoreContext, cloud: Cloud, *, progress: ProgressSink | None = None,
                 actor: str | None = None, lease_seconds: float | None = None, logins: Logins | None = None):
        from tpujob.attempt.logins import Logins
        from tpujob.hosts.keys import public_key_line

        self.ctx = ctx
        self.cloud = cloud
        # Who logs in on a slice: OS Login's POSIX user or ssh_user (attempt.logins).
        self.logins = logins or Logins(ctx.settings, lambda: public_key_line(ctx.settings.home),
                                       shared=ctx.settings.home / "cache" / "oslogin" / ctx.settings.cloud)
        self.progress = progress
        self.actor = actor
        self.lease_seconds = lease_seconds
        self._port: int | None = None
        # A group left open by a setup found done on every host, for the launch that follows it
        # in the same sweep: job id -> ((attempt, slice), group).
        self._kept: dict[int, tuple[tuple[int, str], HostGroup]] = {}
        self._kept_lock = threading.Lock()
        self._keyed: set[tuple[str, str]] = set()  # (slice, ssh-keys line) added by this process
        self._sudo_ok: set[tuple[str, str]] = set()  # (slice, user) this node may act as there

    # -- plumbing ----------------------------------------------------------------------------
    def login(self, job: Job, slice_: Slice, attempt: Attempt | None = None) -> Login:
        """The login on the job's slice (attempt.logins.Login): its user, and why, for a refusal.
        On an attempt whose program runs as another user (set up by another node of the lab):
        with metadata keys, that user (every lab key is in `ssh-keys` for it); under OS Login,
        where each account has its own user, this node's own user acting as that one through
        sudo (`run_as`: roles/compute.osAdminLogin, checked before anything is judged)."""
        login = self.logins.for_slice(job.project, slice_.metadata)
        host_user = getattr(attempt, "host_user", None)
        if not host_user or host_user == login.user:
            return login
        if not login.os_login:
            return replace(login, user=host_user)
        return replace(login, run_as=host_user)

    def group(self, job: Job, attempt: Attempt, slice_: Slice, keys: dict[int, list[str]] | None = None) -> HostGroup:
        if self._port is None:
            self._port = ssh_port(self.ctx.settings)
        login = self.login(job, slice_, attempt)
        if not login.os_login:
            self._ensure_key(job, attempt, slice_, login.user)
        keys = self.host_keys(job, attempt, slice_) if keys is None else keys
        external = external_ips(job)
        hosts = [Host(h.index, h.address(external), self._port, tuple(keys.get(h.index, ())))
                 for h in slice_.hosts]
        pin = host_keys.first_use_pinner(self.ctx.store, job, attempt, keys) if self._accept_new else None
        group = HostGroup(hosts, login.user, load_key(self.ctx.settings.home), accept_new=pin,
                          run_as=login.run_as or None)
        if login.run_as:
            self._check_sudo(group, job, attempt, login)
        return group

    def _check_sudo(self, group: HostGroup, job: Job, attempt: Attempt, login: Login) -> None:
        """Under OS Login, acting on another account's attempt takes sudo as its user: asked
        once per slice and process (`sudo -n true`) before any answer of the hosts is judged, so
        that a node without the role never reads "no program" and replaces a running job.
        SshAuthRefused (the job is left as it is) when a host says sudo is not allowed."""
        with self._kept_lock:
            if (attempt.slice_name, login.run_as) in self._sudo_ok:
                return
        results = group.run("true", timeout=30)
        refused = next((r for r in results if r.exit_code not in (0, None)), None)
        if refused is not None:
            group.close()
            said = (refused.stderr or refused.output).strip().splitlines()
            raise SshAuthRefused(
                f"under OS Login this node logs in as {login.user} ({login.account}), and the attempt's program runs "
                f"as {login.run_as}, another account's user: reading and stopping it takes sudo as that user, which "
                f"host {refused.index} refused ({said[-1] if said else f'exit code {refused.exit_code}'}); fix: "
                f"grant {login.account} roles/compute.osAdminLogin on project {job.project}")
        if all(r.ok for r in results):
            with self._kept_lock:
                self._sudo_ok.add((attempt.slice_name, login.run_as))

    def _ensure_key(self, job: Job, attempt: Attempt, slice_: Slice, user: str) -> None:
        """Metadata keys: a slice made before this node joined the lab (or by a node that had
        not seen its key yet) lacks this node's line in `ssh-keys`; added to its nodes once
        (Cloud.add_ssh_keys: UpdateNode, or setMetadata on each Compute Engine VM), the guest
        agent then lets this node in. SshAuthRefused when it cannot be added: the job is left
        alone (decide's NodeRefused)."""
        from tpujob.hosts.keys import public_key_line

        line = f"{user}:{public_key_line(self.ctx.settings.home)}"
        if line in slice_.metadata.get("ssh-keys", "").splitlines():
            return
        with self._kept_lock:
            if (attempt.slice_name, line) in self._keyed:
                return
        try:
            added = self.cloud.for_api(api_of(job)).add_ssh_keys(job.project, attempt.zone, attempt_nodes(attempt),
                                                                  [line])
        except TpujobError as exc:
            raise SshAuthRefused(f"this node's SSH key is not in the slice's ssh-keys metadata and could not be "
                                 f"added: {exc}") from exc
        with self._kept_lock:
            self._keyed.add((attempt.slice_name, line))
        if added:
            self.ctx.store.add_event(job.id, "hosts", f"added this node's SSH key ({user}) to the ssh-keys "
                                     f"metadata of {', '.join(added)}")

    @property
    def _accept_new(self) -> bool:
        return self.ctx.settings.ssh_host_keys == "accept-new"

    @contextlib.contextmanager
    def _group_for(self, job: Job, attempt: Attempt, slice_: Slice,
                   keys: dict[int, list[str]] | None = None) -> Iterator[_Held]:
        """The slice's hosts for one step: the group a setup found done left open (its
        connections reused: one SSH handshake per host fewer for the launch), else a new one.
        Closed after the step unless the step keeps it (`keep`)."""
        where = (attempt.number, slice_.name)
        with self._kept_lock:
            kept = self._kept.pop(job.id, None)
        if kept is not None and kept[0] != where:
            kept[1].close()
            kept = None
        group = kept[1] if kept is not None else self.group(job, attempt, slice_, keys)
        holder = _Held(group)
        try:
            yield holder
        finally:
            if holder.keep:
                with self._kept_lock:
                    stale = self._kept.pop(job.id, None)
                    self._kept[job.id] = (where, group)
                if stale is not None:
                    stale[1].close()
            else:
                group.close()

    def host_keys(self, job: Job, attempt: Attempt, slice_: Slice) -> dict[int, list[str]]:
        """The slice's host keys, recorded or published (attempt.host_keys.collect)."""
        return host_keys.collect(self.ctx.store, self.cloud, job, attempt, slice_)

    def await_host_keys(self, job: Job, attempt: Attempt, slice_: Slice, timeout: float) -> dict[int, list[str]]:
        """Every host's published key, waited for within the setup timeout; none waited for
        with accept-new (attempt.host_keys.await_published)."""
        return host_keys.await_published(self.ctx.store, self.cloud, job, attempt, slice_, timeout,
                                         accept_new=self._accept_new, renew=self._renew_lease)

    def log_dir(self, job: Job, attempt: Attempt) -> Path:
        """The attempt's local log dir, made; LocalIOError (never a host's fault) where it cannot be."""
        path = self.ctx.settings.home / local_log_dir(job.id, attempt.number)
        try:
            private_dir(path)
        except OSError as exc:
            raise LocalIOError.of("make the log directory", path, exc) from exc
        return path

    def host_attempt(self, job: Job, attempt: Attempt, slice_: Slice, *, secrets: dict[str, str] | None = None
                     ) -> program.HostAttempt:
        """What the host scripts need, secrets only where passed (attempt.host_attempts.build)."""
        return host_attempts.build(job, attempt, slice_, self.login(job, slice_, attempt).host_user, secrets=secrets)

    def _renew_lease(self, job: Job) -> None:
        """Renew the job's lease before a host step; JobLocked (the sweep retries later) when
        another actor took it meanwhile: then this one must not touch the hosts."""
        if self.actor is not None:
            if self.lease_seconds is None:
                raise ValueError("an actor's host steps need lease_seconds, the TTL of its leases")
            self.ctx.store.acquire_lease(job.id, self.actor, self.lease_seconds)

    def _progress(self, step: str) -> Callable[[Progress], None] | None:
        if self.progress is None:
            return None
        sink = self.progress
        return lambda p: sink(step, p)

    # -- HostOps -----------------------------------------------------------------------------
    def start_setup(self, job: Job, attempt: Attempt, slice_: Slice) -> SetupSeen:
        """Sync, mount, then start the attempt's setup detached on every host; returns at once
        with what the hosts said of it (a later sweep observes it: setup_status)."""
        spec = spec_of(job)
        try:
            values = secrets.resolve(spec.spec.secrets)
        except ConfigError as exc:  # gone since create: a setup failure, never a retry loop
            raise SetupFailed(str(exc)) from exc
        host_attempt = self.host_attempt(job, attempt, slice_, secrets=values)
        timeout = policy_of(spec).setup_timeout(len(slice_.hosts))
        keys = self.await_host_keys(job, attempt, slice_, timeout)
        try:
            seen = self._prepare_and_start(job, attempt, slice_, spec, host_attempt, timeout, keys,
                                           tuple(values.values()))
        except SshAuthRefused as exc:  # the hosts said no to the key: say why, and the fix
            raise self.logins.refused(job.project, slice_.metadata, str(exc)) from exc
        # Who the program runs as, once the hosts let this login in: every node of the lab logs
        # in as this user from now on (not before: a login a stale read chose may be refused).
        self.ctx.store.record_host_user(job.id, attempt.number, self.login(job, slice_, attempt).host_user)
        return seen

    def _prepare_and_start(self, job: Job, attempt: Attempt, slice_: Slice, spec: ResolvedSpec,
                           host_attempt: program.HostAttempt, timeout: float, keys: dict[int, list[str]],
                           hidden: tuple[str, ...]) -> SetupSeen:
        """`hidden`: the job's secret values, redacted from whatever a failing host said."""
        logs = self.log_dir(job, attempt)
        log_of = lambda host: logs / f"host-{host.index}.log"  # noqa: E731
        with self._group_for(job, attempt, slice_, keys) as held:
            group = held.group
            if spec.sync_path:
                from tpujob.hosts.sync import sync

                self._renew_lease(job)
                synced = sync(group, Path(spec.sync_path), sync_dir(job.id), progress=self._progress("sync"),
                              timeout=SYNC_TIMEOUT)
                host_answers.step_ok(synced, "sync", hidden)
            runtime = spec.spec.run.runtime
            if runtime is not None:  # the bundled runtime travels like user code
                from tpujob.hosts.sync import sync

                bundle = runtime_bundle.build(self.ctx.settings.home, job.id, runtime)
                self._renew_lease(job)
                uploaded = sync(group, bundle, runtime_bundle_dir(job.id), progress=self._progress("runtime upload"),
                                timeout=SYNC_TIMEOUT)
                host_answers.step_ok(uploaded, "runtime upload", hidden)
            self.check_disks(job, attempt, slice_)  # a reused slice may lack one: say so before mounting
            script = mounts.mount_script(spec, job.id, self.ctx.store.store_tag)  # disks and buckets, before setup
            if script:
                self._renew_lease(job)
                results = group.run(as_command(script, "tpujob-mount"), log_paths=log_of, timeout=timeout,
                                    fail_fast=True, progress=self._progress("mount"))
                host_answers.setup_ok(results, "mount", timeout, hidden)
            self._renew_lease(job)
            modules, packages = ((runtime_bundle.MODULES, runtime_bundle.REQUIREMENTS) if runtime is not None
                                 else ((), ()))
            cache_key = setup_cache.key(spec, attempt.accelerator)
            cached = spec.spec.setup_cache  # not None where there is a cache key
            script = program.setup_script(host_attempt, spec.spec.setup_command, runtime_modules=modules,
                                          runtime_packages=packages, timeout=timeout,
                                          cache_paths=tuple(cached.cache) if cache_key and cached else (),
                                          cache_archive=setup_cache.host_archive(cache_key) if cache_key else "",
                                          cache_digest=setup_cache.digest_of(self.ctx.store, spec, cache_key)
                                          if cache_key else "")
            # Waiting a moment for the setup pays where it is likely over at once (none, or a
            # cache to unpack): the program launches in this sweep. A setup of the job's own
            # takes longer: the worker moves on at once.
            quick = not spec.spec.setup_command or cache_key is not None
            started = program.start_setup(group, host_attempt, script, log_paths=log_of,
                                          progress=self._progress("setup start"),
                                          wait_seconds=program.SETUP_WAIT if quick else 0)
            for s in started:
                if s.state == "refused":
                    raise SshAuthRefused(f"setup on host {s.index}: {s.error}")
                if s.state == "unreachable":
                    raise HostsUnreachable(f"setup on host {s.index}: {s.error}")
            if any(s.state == "failed" and s.exit_code is None for s in started):
                started = program.setup_state(group, host_attempt)  # one that ended earlier: why
            held.keep = all(s.state == "done" for s in started)  # the launch follows at once
            setup_cache.record_digests(self.ctx.store, spec, [s.cache for s in started])
            return setup_states.seen(started, timeout, hidden)

    def launch(self, job: Job, attempt: Attempt, slice_: Slice) -> None:
        """Start the program on every host (its setup done on each)."""
        spec = spec_of(job)
        try:
            values = secrets.resolve(spec.spec.secrets)
        except ConfigError as exc:
            raise SetupFailed(str(exc)) from exc
        host_attempt = self.host_attempt(job, attempt, slice_, secrets=values)
        self._renew_lease(job)
        try:
            with self._group_for(job, attempt, slice_) as held:
                log_of = self._log_paths(job, attempt)
                self._clean(job, held.group, host_attempt, log_of, tuple(values.values()))
                self._renew_lease(job)
                results = program.launch(held.group, host_attempt, host_attempts.program_command(spec, job.id),
                                         log_paths=log_of, timeout=LAUNCH_TIMEOUT,
                                         progress=self._progress("launch"))
        except SshAuthRefused as exc:
            raise self.logins.refused(job.project, slice_.metadata, str(exc)) from exc
        host_answers.step_ok(results, "launch", tuple(values.values()))

    def setup_status(self, job: Job, attempt: Attempt, slice_: Slice) -> SetupSeen:
        """Each host's setup of the attempt, as the sweep observes it (one SSH round)."""
        spec = spec_of(job)
        timeout = policy_of(spec).setup_timeout(len(slice_.hosts))
        unreachable = SetupSeen(tuple(Setup.UNREACHABLE for _ in slice_.hosts))
        try:
            with self._group_for(job, attempt, slice_) as held:
                statuses = program.setup_state(held.group, self.host_attempt(job, attempt, slice_))
                held.keep = all(s.state == "done" for s in statuses)  # the launch follows at once
        except SshAuthRefused as exc:
            return replace(unreachable, refused=self.logins.refusal(job.project, slice_.metadata, str(exc)))
        except TpujobError:
            return unreachable
        setup_cache.record_digests(self.ctx.store, spec, [s.cache for s in statuses])
        seen = setup_states.seen(statuses, timeout, secrets.readable(spec.spec.secrets))
        if seen.refused is None:
            return seen
        why = self.logins.refusal(job.project, slice_.metadata, seen.refused)
        return replace(seen, refused=why) if why else unreachable

    def _clean(self, job: Job, group: HostGroup, host_attempt: program.HostAttempt, log_of: program.LogPaths,
               hidden: tuple[str, ...]) -> None:
        """End what earlier attempts (or anything else) left on the hosts before the launch
        (hosts/program.clean), with an event per host where something was ended or is still
        holding the TPU. A host still held is launched on anyway: its program then fails with
        libtpu's own words, a bad host (decide replaces the slice)."""
        results = program.clean(group, host_attempt, log_paths=log_of)
        host_answers.step_ok(results, "clean", hidden)
        for r in results:
            said_ = host_answers.clean_report(r.output)
            if said_:
                self.ctx.store.add_event(job.id, "hosts", f"cleaned host {r.index}: {said_}")

    def prepare(self, job: Job) -> None:
        """A slice was just asked for: learn how its hosts will be logged in to (the project's
        OS Login, read through google-cloud-compute, whose import alone is a second of CPU) in
        the background while the slice comes, instead of on the setup's path."""
        threading.Thread(target=self._learn_login, args=(job.project,), name="tpujob-login", daemon=True).start()

    def _learn_login(self, project: str) -> None:
        try:
            self.logins.for_slice(project, self.logins.node_metadata())
        except Exception:  # noqa: BLE001 - the setup asks again, and says why
            pass

    def data_disks(self, job: Job, attempt: Attempt) -> tuple[DataDisk, ...]:
        """The slice's data disks, clones made by the first attempt (slice_disks.attempt_disks)."""
        return disks.attempt_disks(self.ctx.settings, job, attempt)

    def check_disks(self, job: Job, attempt: Attempt, slice_: Slice) -> None:
        """SetupFailed when the slice lacks one of the job's disks (slice_disks.ensure_on_slice)."""
        disks.ensure_on_slice(self.ctx.settings, job, attempt, slice_)

    def program_answers(self, job: Job, attempt: Attempt, slice_: Slice, *,
                        quick: bool = False) -> list[program.HostStatus]:
        """Every host's word on the attempt's program (templates/status.sh): the one SSH path
        that asks, for the sweep (program_status) and for `show` (quick: no retries, 5s to
        connect, 15s in all: there a dead host is news, not something to wait out)."""
        host_attempt = self.host_attempt(job, attempt, slice_)
        with self._group_for(job, attempt, slice_) as held:  # closes a group a setup left open
            if quick:
                held.group.retries, held.group.connect_timeout = 0, 5.0
            return program.status(held.group, host_attempt, timeout=15 if quick else 30)

    def program_status(self, job: Job, attempt: Attempt, slice_: Slice) -> tuple[HostObservation, ...]:
        try:
            statuses = self.program_answers(job, attempt, slice_)
        except SshAuthRefused as exc:  # OS Login refused the key's registration
            return tuple(HostObservation(Program.REFUSED, refusal=str(exc)) for _ in slice_.hosts)
        except TpujobError:
            return tuple(HostObservation(Program.UNREACHABLE) for _ in slice_.hosts)
        hidden = secrets.readable(spec_of(job).spec.secrets) if any(s.log_tail for s in statuses) else ()
        observed = tuple(host_answers.observation_of(s, hidden) for s in statuses)
        refused = next((s for s in statuses if s.state == "refused"), None)
        if refused is None:
            return observed
        why = self.logins.refusal(job.project, slice_.metadata, f"host {refused.index}: {refused.error}")
        if why is None:  # logged in under a stale shared read: unreachable this round
            return tuple(HostObservation(Program.UNREACHABLE) if o.program == Program.REFUSED else o for o in observed)
        return tuple(replace(o, refusal=why) if o.program == Program.REFUSED else o for o in observed)

    def stop_program(self, job: Job, attempt: Attempt, slice_: Slice,
                     grace_seconds: float = program.STOP_GRACE_SECONDS) -> None:
        """Stop the program on every host (SIGTERM, SIGKILL after `grace_seconds`); CloudError
        naming the hosts where that failed (unreachable, or the stop script failed): the caller
        decides what that means."""
        with self.group(job, attempt, slice_) as group:
            results = program.stop(group, self.host_attempt(job, attempt, slice_), grace_seconds=grace_seconds,
                                   log_paths=self._log_paths(job, attempt))
        ensure_ok(results, "stopping the program")

    def capture_stacks(self, job: Job, attempt: Attempt, slice_: Slice) -> str:
        """Every host's Python stacks of the program (templates/stacks.sh), kept in the
        attempt's local log dir as stacks.txt; returns what to say in the event."""
        with self.group(job, attempt, slice_) as group:
            results = program.stacks(group, self.host_attempt(job, attempt, slice_))
        path = self.log_dir(job, attempt) / STACKS_FILE
        parts, got = [], 0
        for r in results:
            got += r.ok
            body = r.output if r.ok else f"(no answer: {r.describe()})\n"
            parts.append(f"== host {r.index} ==\n{body}")
        try:
            path.write_text("\n".join(parts))
        except OSError as exc:
            raise LocalIOError.of("write the stacks to", path, exc) from exc
        return f"stacks of {got} of {len(results)} hosts kept in {path}"

    def unmount(self, job: Job, attempt: Attempt, slice_: Slice) -> None:
        """Unmount the job's disks and buckets on every host (templates/unmount.sh: a path not
        mounted is skipped, so running it twice is harmless). CloudError where it failed."""
        script = mounts.unmount_script(spec_of(job), job.id, self.ctx.store.store_tag)
        if script is None:
            return
        with self.group(job, attempt, slice_) as group:
            results = group.run(as_command(script, "tpujob-unmount"), timeout=120,
                                log_paths=self._log_paths(job, attempt))
        ensure_ok(results, "unmounting the job's disks and buckets")

    def _log_paths(self, job: Job, attempt: Attempt) -> Callable[[Host], Path]:
        logs = self.log_dir(job, attempt)
        return lambda host: logs / f"host-{host.index}.log"


class _Held:
    """A step's group, and whether to keep it open for the launch that follows."""

    def __init__(self, group: HostGroup):
        self.group = group
        self.keep = False

