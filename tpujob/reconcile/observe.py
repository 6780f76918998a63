"""observe: what decide is told about each job. Batched where it can be: one listing of nodes
and queued resources per (project, zone), the RUNNING jobs' run dirs in one read, their hosts'
SSH status rounds at once; then, per job under its lease, its slice's phase and its program."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Protocol

from tpujob.cloud.base import Cloud, DataDisk, Slice, SlicePhase
from tpujob.cloud.multislice import pick
from tpujob.errors import (
    LocationDenied,
    PlacementUnavailable,
    QuotaExceeded,
    SlicePreempted,
    StockoutError,
    TpujobError,
)
from tpujob.names import growing_state, own_nodes
from tpujob.reconcile.attempt_slices import attempt_slice
from tpujob.reconcile.observation import HostObservation, Observation, SetupSeen, SliceCondition, condition_of
from tpujob.runtime.contract import RunDirStatus
from tpujob.spec.stored import api_of
from tpujob.store.models import Attempt, Job
from tpujob.store.states import State

if TYPE_CHECKING:
    from tpujob.store.repository import Store


def refusal_of(exc: BaseException) -> tuple[SliceCondition, str | None]:
    """The refusal kinds of SliceCondition, which no cloud phase carries (condition_of is the
    rest): how decide sees a create refused, or a queued resource that ended FAILED, with the same
    typed error (tpujob.cloud.api_calls): the condition, and how far it reaches ("zone", "region",
    or None: the placement itself)."""
    if isinstance(exc, SlicePreempted):
        return SliceCondition.LOST, None
    if isinstance(exc, StockoutError):
        return SliceCondition.STOCKOUT, None
    if isinstance(exc, QuotaExceeded):
        return SliceCondition.NO_QUOTA, exc.scope
    if isinstance(exc, PlacementUnavailable):
        return SliceCondition.UNAVAILABLE, "zone" if isinstance(exc, LocationDenied) else None
    return SliceCondition.REFUSED, None


# SSH status rounds a sweep runs at once (each a few connections; the hosts are remote).
HOST_STATUS_WORKERS = 16

Slices = dict[tuple[str, str], Slice]  # (zone, node or queued resource name) -> as listed
HostsSeen = tuple[int, str, tuple[HostObservation, ...]]  # (attempt number, slice name, hosts)


def listed_slice(slices: Slices, attempt: Attempt) -> Slice | None:
    """The attempt's slice in the listing: its node, or its nodes as one (multislice)."""
    return pick(lambda name: slices.get((attempt.zone, name)), attempt.slice_name, attempt.zone,
                attempt.slices, list(own_nodes(attempt)))


class HostOps(Protocol):
    """What the sweep does on the hosts of a READY slice (tpujob.attempt.hosts)."""

    def start_setup(self, job: Job, attempt: Attempt, slice_: Slice) -> SetupSeen: ...  # detached
    def setup_status(self, job: Job, attempt: Attempt, slice_: Slice) -> SetupSeen: ...
    def launch(self, job: Job, attempt: Attempt, slice_: Slice) -> None: ...
    def program_status(self, job: Job, attempt: Attempt, slice_: Slice) -> tuple[HostObservation, ...]: ...
    def stop_program(self, job: Job, attempt: Attempt, slice_: Slice, grace_seconds: float = ...) -> None: ...
    def capture_stacks(self, job: Job, attempt: Attempt, slice_: Slice) -> str: ...
    def unmount(self, job: Job, attempt: Attempt, slice_: Slice) -> None: ...
    def data_disks(self, job: Job, attempt: Attempt) -> tuple[DataDisk, ...]: ...  # the slice request's disks
    def prepare(self, job: Job) -> None: ...  # a slice was asked for: learn now what its setup needs


class RunDirs(Protocol):
    """The run dirs on GCS (tpujob.attempt.run_dirs.GcsRunDirs): how each program is doing,
    read without SSH. Jobs whose run dir is host-local are left out of the answer."""

    def read(self, jobs: list[tuple[Job, Attempt]], now: float) -> dict[int, RunDirStatus]: ...


class Observer:
    def __init__(self, store: Store, cloud: Cloud, hosts: HostOps, clock: Callable[[], float],
                 run_dirs: RunDirs | None = None):
        self.store = store
        self.cloud = cloud
        self.hosts = hosts
        self.clock = clock
        self.run_dirs = run_dirs
        self._run_dir_seen: dict[int, tuple[int, RunDirStatus]] = {}  # job id -> (attempt, files)
        self._hosts_seen: dict[int, HostsSeen] = {}  # job id -> (attempt, slice, host statuses)
        self._snapshot_at = 0.0

    # -- batched, before any job is acted on -------------------------------------------------
    def slices(self, jobs: list[Job]) -> tuple[Slices, dict[tuple[str, str], str]]:
        """One list per (project, zone) of the jobs' current attempts: the slices seen, and the
        (project, zone)s whose listing failed, with why. One zone down (an outage, a project
        whose permission was revoked) must not blind the sweep to every other zone."""
        seen: Slices = {}
        failed: dict[tuple[str, str], str] = {}
        # Per API too: a zone's Compute Engine TPU VMs are another list than its TPU nodes.
        for project, zone, api in sorted({(j.project, j.zone, api_of(j)) for j in jobs if j.attempt > 0}):
            try:
                listed = self.cloud.for_api(api).list_slices(project, zone)
            except TpujobError as exc:
                failed[(project, zone)] = str(exc)
                continue
            except Exception as exc:  # noqa: BLE001 - an answer the client could not parse, a bug
                failed[(project, zone)] = f"unexpected {type(exc).__name__}: {exc}"
                continue
            for name, slice_ in listed.items():
                seen[(zone, name)] = slice_
        return seen, failed

    def programs(self, jobs: list[Job], slices: Slices, snapshot_at: float, errors: list[str]) -> None:
        """The RUNNING jobs' run dirs and hosts, asked of all of them at once; kept for `observe`."""
        self._snapshot_at = snapshot_at
        running = [(j, a) for j in jobs if j.state == State.RUNNING.value
                   for a in [self.store.current_attempt(j.id)] if a is not None]
        self._run_dir_seen = self._read_run_dirs(running, errors)
        self._hosts_seen = self._ask_hosts(running, slices)

    def _read_run_dirs(self, running: list[tuple[Job, Attempt]],
                       errors: list[str]) -> dict[int, tuple[int, RunDirStatus]]:
        """The RUNNING jobs' run dirs, read in one batch; a storage error costs only this."""
        if self.run_dirs is None or not running:
            return {}
        try:
            found = self.run_dirs.read(running, self.clock())
        except TpujobError as exc:
            errors.append(f"run dirs: {exc}")
            return {}
        numbers = {j.id: a.number for j, a in running}
        return {job_id: (numbers[job_id], run) for job_id, run in found.items()}

    def _ask_hosts(self, running: list[tuple[Job, Attempt]], slices: Slices) -> dict[int, HostsSeen]:
        """Each RUNNING job's program on every host of its READY slice, asked of all those
        slices at once (one SSH round each, in parallel): one by one, a sweep over a few hundred
        running jobs would take minutes. {job id: (attempt number, slice name, statuses)}."""
        wanted = [(job, attempt, slice_) for job, attempt in running
                  for slice_ in [listed_slice(slices, attempt)]
                  if slice_ is not None and condition_of(slice_.phase) == SliceCondition.READY]
        if len(wanted) < 2:
            return {}  # nothing to overlap: `observe` asks as it goes

        def ask(item: tuple[Job, Attempt, Slice]) -> tuple[int, HostsSeen | None]:
            job, attempt, slice_ = item
            try:
                return job.id, (attempt.number, slice_.name, self.hosts.program_status(job, attempt, slice_))
            except Exception:  # noqa: BLE001 - `observe` asks again under the lease and reports it
                return job.id, None

        with ThreadPoolExecutor(max_workers=min(HOST_STATUS_WORKERS, len(wanted))) as pool:
            return {job_id: seen for job_id, seen in pool.map(ask, wanted) if seen is not None}

    # -- per job, under its lease --------------------------------------------------------------
    def slice_of(self, job: Job, attempt: Attempt | None, slices: Slices, snapshot_at: float) -> Slice | None:
        if attempt is None:
            return None
        found = listed_slice(slices, attempt)
        # The listing predates a change another actor made (a new attempt, a create): look again.
        if found is None and (job.state_since or 0) >= snapshot_at - 1:
            found = attempt_slice(self.cloud, job, attempt)
        return found

    def observe(self, job: Job, attempt: Attempt | None, slice_: Slice | None) -> Observation:
        phase = condition_of(slice_.phase) if slice_ is not None else SliceCondition.GONE
        hosts: tuple[HostObservation, ...] = ()
        # (slice_of finds no slice without an attempt: a slice READY or LOST has both.)
        if slice_ is not None and attempt is not None and phase == SliceCondition.READY \
                and State(job.state) == State.RUNNING:
            # The sweep's prefetch, once, unless another actor moved the job since it was taken.
            seen = self._hosts_seen.pop(job.id, None)
            if seen is not None and seen[:2] == (attempt.number, slice_.name) \
                    and (job.state_since or 0) < self._snapshot_at:
                hosts = seen[2]
            else:
                hosts = self.hosts.program_status(job, attempt, slice_)
        if slice_ is not None and phase == SliceCondition.LOST and slice_.failure is not None \
                and State(job.state) == State.PROVISIONING:
            # A queued resource that ended FAILED is a refusal of its request, not a preemption:
            # its failedData.error decides, as the same error ending a create would.
            phase, scope = refusal_of(slice_.failure)
            if phase != SliceCondition.LOST:
                return Observation(slice=phase, refusal=str(slice_.failure), scope=scope, holds_slice=True)
        created = slice_.node_create_time if slice_ is not None else None
        if slice_ is not None and phase == SliceCondition.READY and State(job.state) == State.SETTING_UP \
                and attempt is not None:
            # Setup runs detached on the hosts: how far it got on each (one SSH round).
            setup = self.hosts.setup_status(job, attempt, slice_)
            return Observation(slice=phase, setup=setup.hosts, setup_error=setup.error, ssh_refused=setup.refused,
                               setup_cache=setup.cache,
                               provisioning_seconds=None if created is None else max(0.0, self.clock() - created))
        run_seen = self._run_dir_seen.get(job.id)
        run_dir = run_seen[1] if run_seen and State(job.state) == State.RUNNING and attempt is not None \
            and run_seen[0] == attempt.number else None
        window = slice_.maintenance if slice_ is not None else None
        growth, growth_error = (self._growth(job, attempt) if attempt is not None and attempt.growing
                                and phase == SliceCondition.READY else (None, ""))
        return Observation(slice=phase, hosts=hosts, run_dir=run_dir,
                           lost_slices=slice_.lost_slices if slice_ is not None else (),
                           lost_why=slice_.detail if slice_ is not None and slice_.phase is SlicePhase.FAILED
                           and phase == SliceCondition.LOST else "",
                           growth=growth, growth_error=growth_error,
                           provisioning_seconds=None if created is None else max(0.0, self.clock() - created),
                           health=slice_.health if slice_ is not None else None,
                           health_detail="; ".join(filter(None, (slice_.detail, *slice_.symptoms)))
                           if slice_ is not None and slice_.health else "",
                           maintenance_in_seconds=None if window is None or window.start is None
                           else window.start - self.clock(),
                           maintenance_type=window.type if window is not None else "")

    def _growth(self, job: Job, attempt: Attempt) -> tuple[str | None, str]:
        """How the nodes asked for to grow an elastic attempt back are doing: "creating",
        "ready", or "failed" and why (a node gone whose create ended in an error, or lost)."""
        nodes = growing_state(attempt).get("nodes", {})
        if not nodes:
            return None, ""  # none asked for since the last failure
        grown = attempt_slice(self.cloud, job, attempt, nodes=list(nodes))
        if grown.phase == SlicePhase.READY:
            return "ready", ""
        if condition_of(grown.phase) == SliceCondition.LOST:
            return "failed", f"{', '.join(nodes)}: {grown.node_state}"
        if grown.phase == SlicePhase.GONE or any(k in grown.lost_slices for k in range(len(nodes))):
            operations = " ".join(op for op in nodes.values() if op)
            try:
                if operations and not self.cloud.for_api(api_of(job)).operation_done(
                        operations, "growing back", create=True):
                    return "creating", ""
            except TpujobError as exc:
                return "failed", str(exc)
            return "failed", f"{', '.join(nodes)}: gone"
        return "creating", ""

    def record_steps(self, job: Job, attempt: Attempt | None, obs: Observation) -> None:
        """The attempt's progress as the runtime reports it: lost steps per preemption, and the
        samples `list`, `show` and the dashboard tell the rate and the time left from."""
        steps = [h.step for h in obs.hosts if h.step is not None]
        if obs.run_dir is not None and obs.run_dir.step is not None:  # status.json: the last step
            steps.append(obs.run_dir.step)
        resumed = [h.resumed_from for h in obs.hosts if h.resumed_from is not None]
        totals = [h.total for h in obs.hosts if h.total is not None]
        # host 0 writes the heartbeat every host reads: the first host that read it says it
        reported = next((h.reported for h in obs.hosts if h.reported), None)
        if attempt is not None and (steps or resumed or reported):
            self.store.record_steps(job.id, attempt.number, last_step=max(steps) if steps else None,
                                    resumed_from_step=max(resumed) if resumed else None,
                                    total_steps=max(totals) if totals else None, at=self.clock(),
                                    reported=reported)
