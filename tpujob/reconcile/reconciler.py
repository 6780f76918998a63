"""observe -> decide -> act, for every active job, under each job's lease.

`requeue` (cron), `watch` (loop) and `create` (follow one job) all run `sweep`.
Observation is batched (observe.py): one list of nodes and queued resources per (project,
zone). Then each job's decide/act loop runs in a bounded thread pool (`workers`), each under
its own lease, so that N jobs' slice creation, setup and launch overlap instead of queueing.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from tpujob.cloud.base import Cloud, SlicePhase
from tpujob.errors import AuthError, JobLocked, LocationDenied, TpujobError
from tpujob.names import format_job_id, growing_state, nodes_to_delete
from tpujob.reconcile import placement as placing
from tpujob.reconcile.act import Actor
from tpujob.reconcile.attempt_slices import attempt_slice, delete_attempt_slice
from tpujob.reconcile.decide import decide
from tpujob.reconcile.observation import JobView
from tpujob.reconcile.observe import HostOps, Observer, RunDirs, Slices, listed_slice
from tpujob.reconcile.outcome import Outcome
from tpujob.reconcile.policy import Policy, policy_of
from tpujob.reconcile.scheduling import admit_queued, budget_stops
from tpujob.settings import KNOBS
from tpujob.spec.stored import spec_of
from tpujob.store.models import Attempt, Job
from tpujob.store.states import ACTIVE, AttemptEnd, State

if TYPE_CHECKING:
    from tpujob.store.repository import Store

# How long a sweep follows the node creates it asked for: long enough for most of Google's
# creates (minutes), short enough that a node stuck CREATING does not keep the other jobs
# unobserved (the next sweep goes on waiting for it). How often it lists their zones meanwhile
# (the cloud's operation poll, at least MIN_FOLLOW_POLL), and decides on a node still CREATING
# (decide ends one past requeue.provision_timeout_seconds).
CREATE_FOLLOW_SECONDS = 600.0
MIN_FOLLOW_POLL = 0.25
FOLLOW_RECHECK_SECONDS = 60.0

# The knobs' defaults (TPUJOB_SWEEP_WORKERS, TPUJOB_LEASE_SECONDS: tpujob/settings.py KNOBS).
# While the sweep lives, a thread renews a lease (Store.lease's keep_alive).
SWEEP_WORKERS = int(KNOBS["SWEEP_WORKERS"].default)
LEASE_SECONDS = KNOBS["LEASE_SECONDS"].default
# Rounds for one job in one sweep: slice lost -> RECOVERING -> a new slice (a queued resource's
# create returns it; a node's is followed, see _follow_creates) -> set up and launch. Bounded: a
# round that changes nothing ends it.
MAX_ROUNDS = 4
# Within a round, decisions on what act just learned (a refused create, a failed setup, the
# program launched) instead of on a listing.
MAX_FOLLOW_UPS = 4

# A sweep killed between a job's last move (SUCCEEDED, FAILED) and its slice's delete leaves the
# slice to nobody, since ended jobs are not swept: the zones of jobs ended this recently are
# listed too, and a slice of theirs still there is deleted.
LEFT_SLICE_SECONDS = 24 * 3600.0

# An attempt that ended so leaves a healthy slice the next attempt may set up again.
_REUSABLE = (AttemptEnd.FAILED, AttemptEnd.SETUP_FAILED, AttemptEnd.CANCELLED)


@dataclass
class SweepReport:
    jobs_seen: int = 0
    jobs_acted: int = 0
    skipped_locked: int = 0
    api_calls: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    # `requeue --settle`: jobs this sweep left setting up, swept again until their setup
    # ended; and how many of them were past it (launched, or failed) before the time ran out.
    setups_followed: int = 0
    setups_ended: int = 0
    acted: set[int] = field(default_factory=set, repr=False)  # the jobs counted in jobs_acted
    # The lab's scheduler (reconcile/admission.py): QUEUED jobs admitted, jobs evicted for them.
    admitted: int = 0
    evicted: int = 0


class Reconciler:
    def __init__(self, store: Store, cloud: Cloud, hosts: HostOps, actor: str, *,
                 ssh_keys: tuple[str, ...] = (), metadata: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time, node: str = "",
                 lease_seconds: float = LEASE_SECONDS,
                 run_dirs: RunDirs | None = None, workers: int = SWEEP_WORKERS):
        self.store = store
        self.cloud = cloud
        self.actor = actor
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.workers = workers
        self.observer = Observer(store, cloud, hosts, clock, run_dirs)
        self.acting = Actor(store, cloud, hosts, actor, ssh_keys=ssh_keys, clock=clock, metadata=metadata,
                            node=node)
        self._evicting: dict[int, str] = {}  # this sweep's evictions: job id -> why
        self._over_budget: dict[int, str] = {}  # jobs a cost cap stops this sweep -> why

    @property
    def auth_errors(self) -> dict[int, AuthError]:
        return self.acting.auth_errors

    @property
    def config_errors(self) -> dict[int, LocationDenied]:
        return self.acting.config_errors

    @property
    def node_problems(self) -> dict[int, str]:
        """Jobs whose hosts this node could not log in on in the last sweep, and why (left alone)."""
        return self.acting.node_problems

    def use_ssh_keys(self, keys: tuple[str, ...]) -> None:
        """The `ssh-keys` lines new slices get from now on: a `watch` reads the lab's again
        before each sweep, so a node that joined since is let in on the next slice."""
        self.acting.ssh_keys = keys

    def sweep(self, job_ids: list[int] | None = None) -> SweepReport:
        started, calls0 = time.monotonic(), self.cloud.api_calls
        report = SweepReport()
        self.auth_errors.clear()
        self.config_errors.clear()
        self.acting.node_problems.clear()
        jobs = self.store.list_jobs(states=ACTIVE)
        if job_ids is not None:
            wanted = set(job_ids)
            jobs = [j for j in jobs if j.id in wanted]
        snapshot_at = self.clock()
        left = [] if job_ids is not None else [
            j for j in self.store.jobs_ended_since(snapshot_at - LEFT_SLICE_SECONDS) if _frees_its_slice(j)]
        slices, blind = self.observer.slices(jobs + left)
        # Jobs in a zone that could not be listed are not judged on a missing listing this sweep.
        skipped = [j for j in jobs if j.attempt > 0 and (j.project, j.zone) in blind]
        for (project, zone), why in sorted(blind.items()):
            count = sum(1 for j in skipped if (j.project, j.zone) == (project, zone))
            report.errors.append(f"{project}/{zone}: listing failed, {count} job(s) skipped: {why}")
        jobs = [j for j in jobs if j.id not in {k.id for k in skipped}]
        self.observer.programs(jobs, slices, snapshot_at, report.errors)
        try:
            self.store.mark_observed([j.id for j in jobs], snapshot_at)
        except Exception as exc:  # noqa: BLE001 - what `list` shows as "seen": the sweep goes on
            # A store locked past its busy timeout (SQLite: 30 s, many sweeps on a busy machine)
            # ended the whole sweep here; each job's act then tries its own lease, and skips the
            # job if the store still refuses it.
            report.errors.append(f"when the slices were seen is not recorded: {self.store.error_line(exc)}")
        report.jobs_seen = len(jobs) + len(skipped)
        admitted = set(self._admit(report, jobs))
        report.evicted = len(self._evicting)
        # A job still QUEUED has nothing to act on: no lease taken for it.
        jobs = [j for j in jobs if j.state != State.QUEUED.value or j.id in admitted]
        self._act_all_reported(jobs, slices, snapshot_at, report)
        if self._evicting and job_ids is None:
            # The evicted jobs freed their chips in this sweep: the jobs waiting for them are
            # admitted and started now, not a sweep later (evictions planned now wait for it).
            wanted = set(self._admit(report, None))
            self._evicting = {}
            self._act_all_reported([j for j in self.store.list_jobs(states=ACTIVE) if j.id in wanted],
                                   {}, self.clock(), report)
            self._follow_creates(sorted(wanted), report)
        self._follow_creates([j.id for j in jobs], report)
        for job_id, why in sorted(self.acting.node_problems.items()):
            report.errors.append(f"job {format_job_id(job_id)}: {why}")
        for job in left:
            error = self.free_left_slice(job, slices)
            if error:
                report.errors.append(error)
        report.api_calls = self.cloud.api_calls - calls0
        report.seconds = time.monotonic() - started
        return report

    def _admit(self, report: SweepReport, jobs: list[Job] | None) -> list[int]:
        """The lab's queue (reconcile/scheduling.py): the jobs admitted now, the evictions for
        the jobs acted on next, and (of `jobs`; None: as this sweep found) those a cost cap
        stops. A store that refuses is reported and admits nothing; the sweep goes on."""
        try:
            if jobs is not None:
                self._over_budget = {}
                self._over_budget = budget_stops(self.store, jobs, self.store.clock())
            done = admit_queued(self.store, stopped=self._over_budget)
        except Exception as exc:  # noqa: BLE001 - a store locked or refusing: the other jobs go on
            self._evicting = {}
            message = str(exc) if isinstance(exc, TpujobError) else self.store.error_line(exc)
            report.errors.append(f"admission: {message}")
            return []
        report.admitted += len(done.admitted)
        self._evicting = done.evict
        return done.admitted

    def _act_all_reported(self, jobs: list[Job], slices: Slices, snapshot_at: float, report: SweepReport) -> None:
        """act_all, its outcomes added to the report (a job acted on twice in one sweep, its
        create asked for and then its slice set up, counts once)."""
        for job, (outcome, error) in zip(jobs, self.act_all(jobs, slices, snapshot_at)):
            if outcome == "acted":
                report.acted.add(job.id)
            report.skipped_locked += outcome == "locked"
            if error:
                report.errors.append(error)
        report.jobs_acted = len(report.acted)

    def _follow_creates(self, job_ids: list[int], report: SweepReport) -> None:
        """A node create is not waited for by a worker of its own (with 16 workers, 50 creates
        would wait in waves): the sweep lists the zones of the nodes it asked for until each is
        READY (or lost, or absent: its operation says why), and acts on those jobs as they
        change, so that one sweep still sets up the slices it created."""
        deadline = time.monotonic() + CREATE_FOLLOW_SECONDS
        following = self._creating({job_id: None for job_id in job_ids})
        if not following:
            return  # nor the cloud's poll asked for: the cloud may not be built (clients.make_cloud)
        poll = max(float(getattr(self.cloud, "poll_interval", 2.0)), MIN_FOLLOW_POLL)
        decided = {job_id: time.monotonic() for job_id in following}
        waiting: set[int] = set()  # a flex-start VM waiting for capacity: hours, not a create's minutes
        while following and time.monotonic() + poll < deadline:
            time.sleep(poll)
            jobs = [job for job, _ in following.values()]
            snapshot_at = self.clock()
            slices, blind = self.observer.slices(jobs)
            changed = []
            for job, attempt in following.values():
                listed = listed_slice(slices, attempt)
                if listed is not None and listed.phase == SlicePhase.QUEUED:
                    waiting.add(job.id)  # decided on once more below, then left to the next sweeps
                if (job.project, job.zone) not in blind and (
                        listed is None or listed.phase != SlicePhase.PROVISIONING
                        or time.monotonic() - decided[job.id] >= FOLLOW_RECHECK_SECONDS):
                    changed.append(job)
                    decided[job.id] = time.monotonic()
            self._act_all_reported(changed, slices, snapshot_at, report)
            following = self._creating({job_id: attempt.number for job_id, (_, attempt) in following.items()
                                        if job_id not in waiting})

    def _creating(self, wanted: dict[int, int | None]) -> dict[int, tuple[Job, Attempt]]:
        """The jobs among these whose node create is under way, with that attempt; given an
        attempt number, only while that attempt is current (a job that moved on to a next
        attempt in this sweep is left to the next sweep)."""
        found = {}
        for job_id, number in wanted.items():
            job = self.store.get(job_id)
            if State(job.state) != State.PROVISIONING or (number is not None and job.attempt != number):
                continue
            attempt = self.store.current_attempt(job_id)
            if attempt is not None and not attempt.queued and attempt.create_operation:
                found[job_id] = (job, attempt)
        return found

    def act_all(self, jobs: list[Job], slices: Slices, snapshot_at: float) -> list[tuple[str, str | None]]:
        """Every job's decide/act, `workers` at a time: one job's slice creation, setup and launch
        do not wait for another's. Outcomes in the jobs' order (see act_on)."""
        def act(job: Job) -> tuple[str, str | None]:
            return self.act_on(job, slices, snapshot_at)

        if self.workers <= 1 or len(jobs) < 2:
            return [act(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="tpujob-act") as pool:
            return list(pool.map(act, jobs))

    def act_on(self, job: Job, slices: Slices, snapshot_at: float) -> tuple[str, str | None]:
        """One job's decide/act under its own lease: ("acted" | "idle" | "locked", the error
        line or None). Never raises: one job's trouble (or a bug met on it) is reported, recorded
        as an `error` event, and the other jobs go on."""
        try:
            lease = self.store.lease(job.id, self.actor, self.lease_seconds, keep_alive=True)
            lease.__enter__()
        except JobLocked:
            return "locked", None
        except Exception as exc:  # noqa: BLE001 - the store refused this job's lease: skip it
            return "idle", f"job {format_job_id(job.id)}: lease not taken: {self.store.error_line(exc)}"
        try:
            return ("acted" if self.reconcile(job.id, slices, snapshot_at) else "idle"), None
        except TpujobError as exc:
            return "idle", self._job_error(job.id, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug met on one job must not stop the others
            return "idle", self._job_error(job.id, f"unexpected {type(exc).__name__}: {exc}")
        finally:
            try:
                lease.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the lease then expires by itself
                pass

    def free_left_slice(self, job: Job, slices: Slices) -> str | None:
        """Delete an ended job's slice that is still listed (see LEFT_SLICE_SECONDS), under the
        job's lease; the error line, or None."""
        attempt = self.store.current_attempt(job.id)
        if attempt is None or listed_slice(slices, attempt) is None:
            return None
        try:
            with self.store.lease(job.id, self.actor, self.lease_seconds):
                if not _frees_its_slice(self.store.get(job.id)):  # resumed (or kept) meanwhile
                    return None
                # The sweep that ended it may have deleted it since this one's listing.
                if attempt_slice(self.cloud, job, attempt, nodes=nodes_to_delete(attempt)).phase == SlicePhase.GONE:
                    return None
                delete_attempt_slice(self.cloud, self.store, job, attempt, "left behind when the job ended "
                                     "(the sweep that ended it stopped before deleting it)")
        except JobLocked:
            return None
        except TpujobError as exc:
            return self._job_error(job.id, f"deleting its slice left behind: {exc}")
        return None

    def _job_error(self, job_id: int, message: str) -> str:
        try:
            self.store.add_event(job_id, "error", message)
        except Exception:  # noqa: BLE001 - the store itself may be what failed
            pass
        return f"job {format_job_id(job_id)}: {message}"

    def reconcile(self, job_id: int, slices: Slices, snapshot_at: float) -> bool:
        """decide -> act rounds for one job, under its lease; returns whether anything was done.
        Each round decides on an observation, then on what act learned (follow-ups), until an
        outcome brings nothing new. Another round follows when the attempt just ended (a
        preempted job's next attempt starts at once) or a create just returned the slice (READY:
        set up and launched now, not a sweep later)."""
        acted = False
        for _ in range(MAX_ROUNDS):
            job = self.store.get(job_id)
            before = State(job.state)
            if before not in ACTIVE:
                break
            attempt = self.store.current_attempt(job_id)
            slice_ = self.observer.slice_of(job, attempt, slices, snapshot_at)
            obs = self.observer.observe(job, attempt, slice_)
            self.observer.record_steps(job, attempt, obs)
            outcome: Outcome | None = None
            for _ in range(MAX_FOLLOW_UPS):
                actions = decide(self._view(job, attempt), obs, self._policy(job))
                if not actions:
                    break
                outcome = self.acting.act(job, attempt, slice_, actions)
                acted = True
                if outcome.observed is None:
                    break
                job, attempt = self.store.get(job_id), self.store.current_attempt(job_id)
                obs, slice_ = outcome.observed, outcome.slice
                if State(job.state) not in ACTIVE:
                    break
            if outcome is None or outcome.kind == "retry_after":
                break
            after = State(self.store.get(job_id).state)
            if after == before:
                break
            if after == State.RECOVERING:
                slices = {}  # decide again now: no backoff (a preemption) starts the next attempt
            elif after == State.PROVISIONING and outcome.slice is not None:
                # A node create returns once the node is READY; a queued resource still waiting
                # ends the rounds.
                attempt = self.store.current_attempt(job_id)
                if attempt is None:  # it was just created, for this attempt's slice
                    raise RuntimeError(f"job {format_job_id(job_id)}: provisioning without an attempt")
                # Several slices are listed node by node: the next round reads them afresh
                # (slice_of, as for a job another actor just moved).
                slices = {(attempt.zone, attempt.slice_name): outcome.slice} if attempt.slices == 1 else {}
            else:
                break
        return acted

    def _policy(self, job: Job) -> Policy:
        return policy_of(spec_of(job))

    def _view(self, job: Job, attempt: Attempt | None) -> JobView:
        now = self.clock()
        spec = spec_of(job)
        reuse = bool(attempt is not None and attempt.end_reason in _REUSABLE)
        options = spec.placements()
        # Only where a refused create is decided on: the attempts are one more query per job.
        choosing = len(options) > 1 and State(job.state) == State.PROVISIONING
        return JobView(
            state=State(job.state), attempt=job.attempt, preemptions=job.preemptions, failures=job.failures,
            nan_restarts=job.nan_restarts, hangs=job.hangs, hosts=spec.hosts,
            in_state_seconds=now - (job.state_since if job.state_since is not None else job.updated_at),
            unhealthy_seconds=None if job.unhealthy_since is None else now - job.unhealthy_since,
            placements=len(options), placement=job.placement,
            regions=tuple(placing.region_of(zone) for _, zone in options),
            zones=tuple(zone for _, zone in options),
            blocked_placements=placing.blocked(options, self.store.attempts(job.id)) if choosing else frozenset(),
            keep_slice=job.keep_slice, reuse_slice=reuse,
            job_id=job.id, capacity_misses=job.capacity_misses, flaps=job.flaps, bad_hosts=job.bad_hosts,
            last_end=AttemptEnd(attempt.end_reason) if attempt is not None and attempt.end_reason else None,
            slices=attempt.slices if attempt is not None else 1,
            growth_failed_seconds=_growth_failed_seconds(attempt, now),
            run_limit_reached=bool(attempt is not None and spec.provisioning == "flex-start"
                                   and spec.max_run_duration_seconds
                                   and now - attempt.started_at >= spec.max_run_duration_seconds),
            evictions=job.evictions, evict=self._evicting.get(job.id),
            over_budget=self._over_budget.get(job.id),
        )


def _growth_failed_seconds(attempt: Attempt | None, now: float) -> float | None:
    """Since an elastic attempt's growing back last failed (None: it has not)."""
    if attempt is None:
        return None
    failed_at = growing_state(attempt).get("failed_at")
    return None if failed_at is None else now - failed_at


def _frees_its_slice(job: Job) -> bool:
    """An ended job whose slice must be gone: deleted, or ended and not keeping it (a cancelled
    job keeps its slice for `resume`)."""
    state = State(job.state)
    return job.attempt > 0 and (state == State.DELETED or (
        state in (State.SUCCEEDED, State.FAILED) and not job.keep_slice))
