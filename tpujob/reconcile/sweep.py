"""observe -> decide -> act, for every active job, under each job's lease.

`requeue` (cron), `watch` (loop) and `create` (follow one job) all run `sweep`.
Observation is batched: one list of nodes and queued resources per (project, zone). Then each
job's decide/act runs in a bounded thread pool (`workers`), each under its own lease, so that
N jobs' slice creation, setup and launch overlap instead of queueing behind one another.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from tpujob.cloud.base import Cloud, Slice, SlicePhase as CloudPhase, SliceRequest
from tpujob.errors import (
    AuthError, CloudError, CloudRefused, ConflictError, JobLocked, NotFoundError, PermissionDenied,
    PlacementUnavailable, QuotaExceeded, SetupFailed, StockoutError, TpujobError, UsageError,
)
from tpujob.reconcile.decide import (
    Action, ClearUnhealthy, Count, CreateSlice, DeleteSlice, EndAttempt, HostStatus, JobView,
    MarkUnhealthy, Move, Observation, Policy, ResetCount, RunDir, SetUp, SlicePhase, StartAttempt,
    StopProgram, decide,
)
from tpujob.reconcile import placement as placing
from tpujob.reconcile.policy import placements, policy_of, runtime_version, slice_network
from tpujob.store.models import Attempt, Job
from tpujob.store.states import ACTIVE, AttemptEnd, State

# Cloud phases as decide sees them. DELETING is a slice on its way out: lost.
_PHASES = {
    CloudPhase.QUEUED: SlicePhase.WAITING,
    CloudPhase.PROVISIONING: SlicePhase.PROVISIONING,
    CloudPhase.READY: SlicePhase.READY,
    CloudPhase.PREEMPTED: SlicePhase.LOST,
    CloudPhase.FAILED: SlicePhase.LOST,
    CloudPhase.DELETING: SlicePhase.LOST,
    CloudPhase.GONE: SlicePhase.ABSENT,
}


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: with TPUJOB_CRASH_AT=name the process dies here, as
    under SIGKILL, and the next sweep must converge all the same."""
    if os.environ.get("TPUJOB_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


# SSH status rounds a sweep runs at once (each a few connections; the hosts are remote).
HOST_STATUS_WORKERS = 16
# Jobs acted on at once (TPUJOB_SWEEP_WORKERS): each mostly waits on the cloud and on SSH.
SWEEP_WORKERS = 16
# decide -> act rounds for one job in one sweep: slice lost -> RECOVERING -> a new slice, READY
# when its create returns -> set up and launch. Bounded: a round that changes nothing ends it.
MAX_ROUNDS = 4

# An attempt that ended so leaves a healthy slice the next attempt may set up again.
_REUSABLE = (AttemptEnd.FAILED, AttemptEnd.SETUP_FAILED, AttemptEnd.CANCELLED)

CRASH_POINTS = ("placement", "provisioning", "slice-requested", "slice-deleted", "launched", "moved")


class HostOps(Protocol):
    """What the sweep does on the hosts of a READY slice (tpujob.service.hostops)."""

    def prepare_and_launch(self, job: Job, attempt: Attempt, slice_: Slice) -> None: ...
    def program_status(self, job: Job, attempt: Attempt, slice_: Slice) -> tuple[HostStatus, ...]: ...
    def stop_program(self, job: Job, attempt: Attempt, slice_: Slice) -> None: ...
    def unmount(self, job: Job, attempt: Attempt, slice_: Slice) -> None: ...
    def data_disks(self, job: Job, attempt: Attempt) -> tuple: ...  # the slice request's disks


class RunDirs(Protocol):
    """The run dirs on GCS (tpujob.service.storage.GcsRunDirs): how each program is doing,
    read without SSH. Jobs whose run dir is host-local are left out of the answer."""

    def read(self, jobs: list[tuple[Job, Attempt]], now: float) -> dict[int, RunDir]: ...


@dataclass
class SweepReport:
    jobs_seen: int = 0
    jobs_acted: int = 0
    skipped_locked: int = 0
    api_calls: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(self, store, cloud: Cloud, hosts: HostOps, actor: str, *,
                 ssh_keys: tuple[str, ...] = (), clock: Callable[[], float] = time.time,
                 lease_seconds: float = 300.0, policy_overrides: Optional[dict] = None,
                 run_dirs: Optional[RunDirs] = None, workers: int = SWEEP_WORKERS):
        self.store = store
        self.cloud = cloud
        self.hosts = hosts
        self.actor = actor
        self.ssh_keys = ssh_keys
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.policy_overrides = policy_overrides or {}
        self.run_dirs = run_dirs
        self.workers = workers
        # What a create just returned, by job id: the next round decides on it without a listing.
        self._created: dict[int, tuple[tuple[str, str], Slice]] = {}
        self._run_dir_seen: dict[int, tuple[int, RunDir]] = {}  # job id -> (attempt, files)
        self._hosts_seen: dict[int, tuple] = {}  # job id -> (attempt, slice, host statuses)
        self._snapshot_at = 0.0
        # Credentials or permissions a create was refused for, by job: what `create` (following
        # one job) exits 6 with, naming the fix.
        self.auth_errors: dict[int, AuthError] = {}

    # -- observe -----------------------------------------------------------------------------
    def observe_slices(self, jobs: list[Job]) -> tuple[dict[tuple[str, str], Slice], dict[tuple[str, str], str]]:
        """One list per (project, zone) of the jobs' current attempts: the slices seen, and the
        (project, zone)s whose listing failed, with why. One zone down (an outage, a project
        whose permission was revoked) must not blind the sweep to every other zone."""
        seen: dict[tuple[str, str], Slice] = {}
        failed: dict[tuple[str, str], str] = {}
        for project, zone in sorted({(j.project, j.zone) for j in jobs if j.attempt > 0}):
            try:
                listed = self.cloud.list_slices(project, zone)
            except TpujobError as exc:
                failed[(project, zone)] = str(exc)
                continue
            except Exception as exc:  # noqa: BLE001 - an answer the client could not parse, a bug
                failed[(project, zone)] = f"unexpected {type(exc).__name__}: {exc}"
                continue
            for name, slice_ in listed.items():
                seen[(zone, name)] = slice_
        return seen, failed

    def running_attempts(self, jobs: list[Job]) -> list[tuple[Job, Attempt]]:
        """The RUNNING jobs with their current attempt: what the run dirs and hosts are asked of."""
        return [(j, a) for j in jobs if j.state == State.RUNNING.value
                for a in [self.store.current_attempt(j.id)] if a is not None]

    def observe_run_dirs(self, running: list[tuple[Job, Attempt]],
                         report: SweepReport) -> dict[int, tuple[int, RunDir]]:
        """The RUNNING jobs' run dirs, read in one batch; a storage error costs only this."""
        if self.run_dirs is None or not running:
            return {}
        try:
            found = self.run_dirs.read(running, self.clock())
        except TpujobError as exc:
            report.errors.append(f"run dirs: {exc}")
            return {}
        numbers = {j.id: a.number for j, a in running}
        return {job_id: (numbers[job_id], run) for job_id, run in found.items()}

    def observe_hosts(self, running: list[tuple[Job, Attempt]], slices: dict[tuple[str, str], Slice]) -> dict:
        """Each RUNNING job's program on every host of its READY slice, asked of all those
        slices at once (one SSH round each, in parallel): one by one, a sweep over a few hundred
        running jobs would take minutes. {job id: (attempt number, slice name, statuses)}."""
        wanted = [(job, attempt, slice_) for job, attempt in running
                  for slice_ in [slices.get((attempt.zone, attempt.slice_name))]
                  if slice_ is not None and _PHASES[slice_.phase] == SlicePhase.READY]
        if len(wanted) < 2:
            return {}  # nothing to overlap: _observe asks as it goes

        def ask(item):
            job, attempt, slice_ = item
            try:
                return job.id, (attempt.number, slice_.name, self.hosts.program_status(job, attempt, slice_))
            except Exception:  # noqa: BLE001 - _observe asks again under the lease and reports it
                return job.id, None

        with ThreadPoolExecutor(max_workers=min(HOST_STATUS_WORKERS, len(wanted))) as pool:
            return {job_id: seen for job_id, seen in pool.map(ask, wanted) if seen is not None}

    # -- sweep -------------------------------------------------------------------------------
    def sweep(self, job_ids: Optional[list[int]] = None) -> SweepReport:
        started, calls0 = time.monotonic(), self.cloud.api_calls
        report = SweepReport()
        self.auth_errors.clear()
        jobs = self.store.list_jobs(states=ACTIVE)
        if job_ids is not None:
            wanted = set(job_ids)
            jobs = [j for j in jobs if j.id in wanted]
        snapshot_at = self._snapshot_at = self.clock()
        slices, blind = self.observe_slices(jobs)
        # Jobs in a zone that could not be listed are not judged on a missing listing this sweep.
        skipped = [j for j in jobs if j.attempt > 0 and (j.project, j.zone) in blind]
        for (project, zone), why in sorted(blind.items()):
            count = sum(1 for j in skipped if (j.project, j.zone) == (project, zone))
            report.errors.append(f"{project}/{zone}: listing failed, {count} job(s) skipped: {why}")
        jobs = [j for j in jobs if j.id not in {k.id for k in skipped}]
        running = self.running_attempts(jobs)
        self._run_dir_seen = self.observe_run_dirs(running, report)
        self._hosts_seen = self.observe_hosts(running, slices)
        self.store.mark_observed([j.id for j in jobs], snapshot_at)
        report.jobs_seen = len(jobs) + len(skipped)
        for outcome, error in self.act_all(jobs, slices, snapshot_at):
            report.jobs_acted += outcome == "acted"
            report.skipped_locked += outcome == "locked"
            if error:
                report.errors.append(error)
        report.api_calls = self.cloud.api_calls - calls0
        report.seconds = time.monotonic() - started
        return report

    def act_all(self, jobs: list[Job], slices: dict[tuple[str, str], Slice],
                snapshot_at: float) -> list[tuple[str, Optional[str]]]:
        """Every job's decide/act, `workers` at a time: one job's slice creation, setup and launch
        do not wait for another's. Outcomes in the jobs' order (see act_on)."""
        act = lambda job: self.act_on(job, slices, snapshot_at)  # noqa: E731
        if self.workers <= 1 or len(jobs) < 2:
            return [act(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="tpujob-act") as pool:
            return list(pool.map(act, jobs))

    def act_on(self, job: Job, slices: dict[tuple[str, str], Slice],
               snapshot_at: float) -> tuple[str, Optional[str]]:
        """One job's decide/act under its own lease: ("acted" | "idle" | "locked", the error
        line or None). Never raises: one job's trouble (or a bug met on it) is reported, recorded
        as an `error` event, and the other jobs go on."""
        try:
            self.store.acquire_lease(job.id, self.actor, self.lease_seconds)
        except JobLocked:
            return "locked", None
        except Exception as exc:  # noqa: BLE001 - the store refused this job's lease: skip it
            return "idle", f"job {job.id:06d}: lease not taken: {type(exc).__name__}: {exc}"
        try:
            return ("acted" if self.reconcile(job.id, slices, snapshot_at) else "idle"), None
        except TpujobError as exc:
            return "idle", self._job_error(job.id, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug met on one job must not stop the others
            return "idle", self._job_error(job.id, f"unexpected {type(exc).__name__}: {exc}")
        finally:
            try:
                self.store.release_lease(job.id, self.actor)
            except Exception:  # noqa: BLE001 - the lease then expires by itself
                pass

    def _job_error(self, job_id: int, message: str) -> str:
        try:
            self.store.add_event(job_id, "error", message)
        except Exception:  # noqa: BLE001 - the store itself may be what failed
            pass
        return f"job {job_id:06d}: {message}"

    def reconcile(self, job_id: int, slices: dict[tuple[str, str], Slice], snapshot_at: float) -> bool:
        """decide/act rounds for one job, under its lease. Returns whether anything was done."""
        acted = False
        self._created.pop(job_id, None)  # left by a round that ended in an error
        for _ in range(MAX_ROUNDS):
            job = self.store.get(job_id)
            if State(job.state) not in ACTIVE:
                break
            attempt = self.store.current_attempt(job_id)
            slice_ = self._slice_of(job, attempt, slices, snapshot_at)
            obs = self._observe(job, attempt, slice_)
            self._record_steps(job, attempt, obs)
            actions = decide(self._view(job, attempt), obs, self._policy(job))
            if not actions:
                break
            self._act(job, attempt, slice_, actions)
            acted = True
            created = self._created.pop(job_id, None)
            after = State(self.store.get(job_id).state)
            if after == State(job.state):
                break
            if after == State.RECOVERING:
                # Just ended an attempt: decide again now, so that no backoff (a preemption) or
                # one already over starts the next attempt in this sweep, not a cron interval later.
                slices = {}
            elif after == State.PROVISIONING and created is not None:
                # Just requested a slice: a node create returns once the node is READY, and it
                # is set up now; a queued resource still waiting ends the rounds.
                slices = dict([created])
            else:
                break
        return acted

    def _slice_of(self, job, attempt, slices, snapshot_at) -> Optional[Slice]:
        if attempt is None:
            return None
        found = slices.get((attempt.zone, attempt.slice_name))
        # The listing predates a change another actor made (a new attempt, a create): look again.
        if found is None and (job.state_since or 0) >= snapshot_at - 1:
            found = self.cloud.get_slice(job.project, attempt.zone, attempt.slice_name)
        return found

    def _observe(self, job: Job, attempt, slice_) -> Observation:
        phase = _PHASES[slice_.phase] if slice_ is not None else SlicePhase.ABSENT
        hosts: tuple[HostStatus, ...] = ()
        if phase == SlicePhase.READY and State(job.state) == State.RUNNING:
            # The sweep's prefetch, once, unless another actor moved the job since it was taken.
            seen = self._hosts_seen.pop(job.id, None)
            if seen is not None and seen[:2] == (attempt.number, slice_.name) \
                    and (job.state_since or 0) < self._snapshot_at:
                hosts = seen[2]
            else:
                hosts = self.hosts.program_status(job, attempt, slice_)
        created = slice_.node_create_time if slice_ is not None else None
        seen = self._run_dir_seen.get(job.id)
        run_dir = seen[1] if seen and State(job.state) == State.RUNNING and attempt is not None \
            and seen[0] == attempt.number else None
        return Observation(slice=phase, hosts=hosts, run_dir=run_dir,
                           provisioning_seconds=None if created is None else max(0.0, self.clock() - created))

    def _record_steps(self, job: Job, attempt, obs: Observation) -> None:
        """The attempt's progress as the runtime reports it: lost steps per preemption."""
        steps = [h.step for h in obs.hosts if h.step is not None]
        if obs.run_dir is not None and obs.run_dir.step is not None:  # status.json: the last step
            steps.append(obs.run_dir.step)
        resumed = [h.resumed_from for h in obs.hosts if h.resumed_from is not None]
        if attempt is not None and (steps or resumed):
            self.store.record_steps(job.id, attempt.number, last_step=max(steps) if steps else None,
                                    resumed_from_step=max(resumed) if resumed else None)

    def _policy(self, job: Job) -> Policy:
        policy = policy_of(json.loads(job.spec_json))
        if self.policy_overrides:
            from dataclasses import replace

            policy = replace(policy, **self.policy_overrides)
        return policy

    def _view(self, job: Job, attempt) -> JobView:
        now = self.clock()
        spec = json.loads(job.spec_json)
        reuse = bool(attempt is not None and attempt.end_reason in _REUSABLE)
        options = placements(spec)
        # Only where a refused create is decided on: the attempts are one more query per job.
        choosing = len(options) > 1 and State(job.state) == State.PROVISIONING
        return JobView(
            state=State(job.state), attempt=job.attempt, preemptions=job.preemptions, failures=job.failures,
            nan_restarts=job.nan_restarts, hosts=spec["hosts"],
            in_state_seconds=now - (job.state_since if job.state_since is not None else job.updated_at),
            unhealthy_seconds=None if job.unhealthy_since is None else now - job.unhealthy_since,
            placements=len(options), placement=job.placement,
            regions=tuple(placing.region_of(zone) for _, zone in options),
            blocked_placements=placing.blocked(options, self.store.attempts(job.id)) if choosing else frozenset(),
            keep_slice=job.keep_slice, reuse_slice=reuse,
            job_id=job.id, capacity_misses=job.capacity_misses, flaps=job.flaps,
            last_end=AttemptEnd(attempt.end_reason) if attempt is not None and attempt.end_reason else None,
        )

    # -- act ---------------------------------------------------------------------------------
    def _act(self, job: Job, attempt, slice_, actions: list[Action]) -> None:
        state = State(job.state)
        counters: dict[str, int] = {}
        for action in actions:
            if isinstance(action, Count):
                # Applied with the next Move, in its transaction: a crash in between counts nothing.
                counters[action.counter] = getattr(job, action.counter) + 1
            elif isinstance(action, ResetCount):
                counters[action.counter] = 0
            elif isinstance(action, Move):
                job = self.store.transition(job.id, state, action.to, action.message, end_reason=action.reason,
                                            owner=self.actor, unhealthy_since=None, **counters)
                state, counters = action.to, {}
                crash_point("moved")
            elif isinstance(action, EndAttempt):
                if attempt is not None:
                    self.store.end_attempt(job.id, attempt.number, action.reason)
                    self._unmount(job, attempt, slice_)
            elif isinstance(action, DeleteSlice):
                if attempt is not None:
                    self.cloud.delete_slice(job.project, attempt.zone, attempt.slice_name)
                    crash_point("slice-deleted")
                    self.store.add_event(job.id, "slice", f"deleted slice {attempt.slice_name}")
            elif isinstance(action, StopProgram):
                if attempt is not None and slice_ is not None and slice_.phase == CloudPhase.READY:
                    try:
                        self.hosts.stop_program(job, attempt, slice_)
                    except TpujobError as exc:
                        self.store.add_event(job.id, "hosts", f"stop failed: {exc}")
            elif isinstance(action, MarkUnhealthy):
                self.store.update(job.id, unhealthy_since=self.clock())
                self.store.add_event(job.id, "health", "hosts unreachable or program missing; re-checking")
            elif isinstance(action, ClearUnhealthy):
                self.store.update(job.id, unhealthy_since=None)
            elif isinstance(action, StartAttempt):
                job, attempt, slice_, state = self._start_attempt(job, attempt, slice_, state, action)
                if state not in ACTIVE:
                    return
            elif isinstance(action, CreateSlice):
                job, state = self._create_slice(job, attempt, state)
                if state != State.PROVISIONING:
                    return
            elif isinstance(action, SetUp):
                job, state = self._set_up(job, attempt, slice_, state)
        if counters:
            self.store.update(job.id, **counters)

    def _unmount(self, job, attempt, slice_) -> None:
        """An attempt ending on a slice that stays READY (kept, or reused by the next attempt)
        leaves none of its disk and bucket mounts behind."""
        if slice_ is None or slice_.phase != CloudPhase.READY:
            return
        try:
            self.hosts.unmount(job, attempt, slice_)
        except TpujobError as exc:
            self.store.add_event(job.id, "hosts", f"unmount failed: {exc}")

    def _start_attempt(self, job, attempt, slice_, state, action: StartAttempt):
        spec = json.loads(job.spec_json)
        options = placements(spec)
        # Past the last fallback, back to the primary: capacity comes back where it was missing.
        # Placements refused for good (the zone does not offer the accelerator, or the region's
        # quota is spent) are passed over.
        placement = job.placement
        if action.next_placement:
            placement = placing.following(job.placement, len(options),
                                          placing.blocked(options, self.store.attempts(job.id)))
        accelerator, zone = options[placement]
        if action.reuse_slice and attempt is not None:
            job, new = self.store.start_attempt(
                job.id, state, State.SETTING_UP, "new attempt on the same slice", zone=attempt.zone,
                accelerator=attempt.accelerator, queued=attempt.queued, reuse_slice=attempt.slice_name,
                owner=self.actor)
            return job, new, slice_, State.SETTING_UP
        if placement != job.placement:
            crash_point("placement")  # chosen, nothing written yet: the next sweep chooses again
        job, new = self.store.start_attempt(
            job.id, state, State.PROVISIONING, f"creating the slice of attempt {job.attempt + 1}", zone=zone,
            accelerator=accelerator, queued=spec["spec"]["tpu"]["queued"], owner=self.actor, placement=placement)
        crash_point("provisioning")
        job, state = self._create_slice(job, new, State.PROVISIONING)
        return job, new, None, state

    def _decide_on_create(self, job, attempt, obs: Observation):
        """A create the cloud turned down: decide and act on it now (the attempt has no slice)."""
        actions = decide(self._view(self.store.get(job.id), attempt), obs, self._policy(job))
        self._act(self.store.get(job.id), attempt, None, actions)
        job = self.store.get(job.id)
        return job, State(job.state)

    def _create_slice(self, job, attempt, state):
        spec = json.loads(job.spec_json)
        tpu = spec["spec"]["tpu"]
        try:
            request = SliceRequest(
                project=job.project, zone=attempt.zone, name=attempt.slice_name,
                accelerator_type=attempt.accelerator,
                runtime_version=runtime_version(spec, attempt.accelerator), provisioning=tpu["provisioning"],
                queued=attempt.queued,
                labels={"tpujob-job": f"{job.id:06d}", "tpujob-attempt": str(attempt.number)},
                # The job's disks: clones made at the first attempt, reused after.
                ssh_keys=self.ssh_keys, data_disks=self.hosts.data_disks(job, attempt),
                **slice_network(tpu),
            )
            create = self.cloud.create_queued_resource if attempt.queued else self.cloud.create_node
            self._created[job.id] = ((attempt.zone, attempt.slice_name), create(request))
        except ConflictError:
            # The slice exists: an earlier try of this very create got through. Adopt it.
            self.store.add_event(job.id, "slice", f"adopted existing {attempt.slice_name}")
            return job, state
        except StockoutError as exc:
            self.store.add_event(job.id, "stockout", str(exc))
            return self._decide_on_create(job, attempt, Observation(slice=SlicePhase.STOCKOUT))
        except (CloudRefused, PermissionDenied, NotFoundError, UsageError) as exc:
            # For good: a bad request, a missing permission, a missing snapshot or disk, a spent
            # quota, a zone that does not offer the accelerator. The same create would fail every
            # sweep; decide moves on to another placement or ends the job instead.
            phase = (SlicePhase.NO_QUOTA if isinstance(exc, QuotaExceeded) else
                     SlicePhase.UNAVAILABLE if isinstance(exc, PlacementUnavailable) else SlicePhase.REFUSED)
            if isinstance(exc, AuthError):
                self.auth_errors[job.id] = exc
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} refused: {exc}")
            return self._decide_on_create(job, attempt, Observation(slice=phase, refusal=str(exc)))
        except AuthError as exc:  # 401: the sweep's own credentials, not the job's fault
            self.auth_errors[job.id] = exc
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry "
                                                  f"once the credentials work: {exc}")
            return job, state
        except CloudError as exc:
            self.store.add_event(job.id, "cloud", f"create of {attempt.slice_name} failed, will retry: {exc}")
            return job, state
        crash_point("slice-requested")
        self.store.add_event(job.id, "slice", f"requested {attempt.slice_name} "
                                              f"({'queued resource' if attempt.queued else 'node'})")
        return job, state

    def _lost_under_setup(self, job, attempt) -> Optional[Slice]:
        """The slice, read again after a setup step failed, when it is gone or dead (preempted
        meanwhile); None when it still looks usable or cannot be read."""
        try:
            again = self.cloud.get_slice(job.project, attempt.zone, attempt.slice_name)
        except TpujobError:
            return None
        return again if _PHASES[again.phase] in (SlicePhase.LOST, SlicePhase.ABSENT) else None

    def _set_up(self, job, attempt, slice_, state):
        if slice_ is None:
            slice_ = self.cloud.get_slice(job.project, attempt.zone, attempt.slice_name)
        if slice_.hosts:
            # The address tpujob (and so the user) reaches host 0 on, as `list` shows it.
            external = slice_network(json.loads(job.spec_json)["spec"]["tpu"])["external_ips"]
            self.store.update(job.id, host0_ip=slice_.hosts[0].address(external))
        try:
            self.hosts.prepare_and_launch(job, attempt, slice_)
            crash_point("launched")
        except SetupFailed as exc:
            view = self._view(self.store.get(job.id), attempt)
            actions = decide(view, Observation(slice=SlicePhase.READY, setup_error=str(exc)), self._policy(job))
            self._act(self.store.get(job.id), attempt, slice_, actions)
            job = self.store.get(job.id)
            return job, State(job.state)
        except TpujobError as exc:  # hosts not answering yet: the next sweep tries again
            gone = self._lost_under_setup(job, attempt)
            if gone is not None:  # e.g. a disk attach refused because the node was preempted
                states = ", ".join(filter(None, (gone.node_state, gone.queued_resource_state))) or "gone"
                self.store.add_event(job.id, "setup", f"setup stopped, the slice is {states}: {exc}")
                actions = decide(self._view(self.store.get(job.id), attempt), Observation(slice=SlicePhase.LOST),
                                 self._policy(job))
                self._act(self.store.get(job.id), attempt, gone, actions)
                job = self.store.get(job.id)
                return job, State(job.state)
            self.store.add_event(job.id, "setup", f"setup will be retried: {exc}")
            return job, state
        job = self.store.transition(job.id, state, State.RUNNING, f"program launched on {len(slice_.hosts)} hosts",
                                    owner=self.actor)
        return job, State.RUNNING
