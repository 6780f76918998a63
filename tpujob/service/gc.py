"""`tpujob gc`: cloud resources tpujob made that no active job of this store owns.

What counts: queued resources, nodes, disks and snapshots labelled `tpujob-job` (anything
without that label is never touched), and on the Compute Engine path (tpu.api: compute) lone TPU
VMs ("instance"), multi-host slices ("mig": its MIG, instance template and workload policy,
deleted together) and a slice's template or policy left without its MIG (tpujob.cloud.
compute_tpu, ComputeTpuCloud._mig_resources, says how each is told: a template by its
properties.labels, a policy, which has no labels, by its name). Only this store's resources are
ever listed: those labelled with its id (`tpujob-store`), and a workload policy whose name
carries its tag (tpujob/names.py). Each is an orphan when its job ended or is gone from the
store, at any age. Another store's (another lab's, a test store's), and one made before stores
had ids, are never touched: that store's job may be alive, and only that store can tell.

The cloud is read in one batched pass: per zone one queued-resources list, one nodes list and
one disks list (and Compute Engine's instances, MIGs with their members, templates and
policies), and one snapshots list for the project. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from tpujob import catalogue
from tpujob.clients import make_cloud, make_compute
from tpujob.errors import TpujobError, UsageError
from tpujob.names import JOB_LABEL, SLICE_NAME, STORE_LABEL, format_job_id, store_tag
from tpujob.service.context import Context
from tpujob.store.identity import store_id
from tpujob.store.states import ACTIVE, State

# Deletion order: a queued resource (with force, which takes its node along), then nodes, then
# the disks they used (Compute refuses to delete a disk still attached), then snapshots.
# A MIG (with its template and policy) before a lone template or policy, all before disks.
_ORDER = ("queued-resource", "node", "mig", "instance", "instance-template", "workload-policy",
          "disk", "snapshot")
COMPUTE_KINDS = ("mig", "instance", "instance-template", "workload-policy")
SLICE_KINDS = ("node", "mig", "instance")  # what runs a program on hosts
# Global (a template) or regional (a policy): listed from every zone gc looks in, kept once.
_NOT_ZONAL = ("instance-template", "workload-policy")


@dataclass(frozen=True)
class Leftover:
    kind: str  # _ORDER: queued-resource | node | mig | instance | instance-template | ... | snapshot
    name: str
    zone: str  # "" for a snapshot (global)
    job: str  # the tpujob-job label
    store: str  # the tpujob-store label ("" where none)
    why: str
    state: str
    age_seconds: float | None
    cost_per_hour_usd: float | None  # None: no published price

    def to_json_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Deletion:
    leftover: Leftover
    error: str = ""  # "" when deleted


def check_options(ctx: Context, zones: list[str]) -> None:
    """Bad input is refused before any cloud call."""
    known = catalogue.TPU_ZONES | {j.zone for j in ctx.store.list_jobs(include_ended=True)}
    for zone in zones:
        if zone not in known:
            raise UsageError(f"unknown zone {zone!r}: not a TPU zone in Google's published table "
                             "nor the zone of a job on record")


def default_zones(ctx: Context) -> list[str]:
    """The zones of this store's jobs (every attempt's: fallbacks included) and the configured one."""
    zones = {ctx.settings.zone} if ctx.settings.zone else set()
    for job in ctx.store.list_jobs(include_ended=True):
        zones.add(job.zone)
        zones.update(a.zone for a in ctx.store.attempts(job.id))
    return sorted(zones)


def find(ctx: Context, zones: list[str] | None = None, *, cloud: Any = None, compute: Any = None,
         now: float | None = None) -> list[Leftover]:
    """Every leftover of this store in the project and zones, in deletion order."""
    zones = list(zones or [])
    check_options(ctx, zones)
    zones = zones or default_zones(ctx)
    if not zones:
        raise UsageError("no zone to look in: no job on record and no zone setting; pass --zone")
    project = ctx.default_project
    if not project:
        raise UsageError("no project: tpujob config set project PROJECT_ID")
    cloud = cloud or make_cloud(ctx.settings)
    compute = compute or make_compute(ctx.settings)
    now = ctx.store.clock() if now is None else now  # the store server's clock, not this node's
    listed = {zone: (_tpu_resources(cloud, project, zone), compute.list_disks(project, zone))
              for zone in zones}
    snapshots = compute.list_snapshots(project)
    # The store is read after the cloud: a job is recorded before its first create, so whatever
    # a list showed belongs to a job this read sees (or to none any more).
    owners = _Owners(ctx)

    found: list[Leftover] = []
    nodes_in_use: set[tuple[str, str]] = set()  # (zone, node) kept: their disks stay too
    seen: set[tuple[str, str]] = set()  # (kind, name) of a template or policy already weighed
    for zone, (slices, disks) in listed.items():
        for r in slices:
            if r.kind in _NOT_ZONAL:
                if (r.kind, r.name) in seen:
                    continue
                seen.add((r.kind, r.name))
            why = owners.why(r.labels, r.kind, r.name)
            if why is None:
                if r.kind in SLICE_KINDS:
                    nodes_in_use.add((zone, r.name))
                continue
            found.append(_leftover(r.kind, r.name, zone, r.labels, why, r.state, r.created, now,
                                   _slice_cost(r)))
        for d in disks:
            why = owners.why(d.labels, "disk", d.name)
            if why is None or any((zone, u) in nodes_in_use for u in d.users):
                continue
            found.append(_leftover("disk", d.name, zone, d.labels, why, d.status, d.created, now,
                                   catalogue.disk_hourly_cost(d.type, d.size_gb)))
    for s in snapshots:
        why = owners.why(s.labels, "snapshot", s.name)
        if why is not None:
            found.append(_leftover("snapshot", s.name, "", s.labels, why, s.status, s.created, now,
                                   catalogue.snapshot_hourly_cost(s.storage_bytes)))
    return sorted(found, key=lambda x: (_ORDER.index(x.kind), x.zone, x.name))


def delete(ctx: Context, leftovers: list[Leftover], *, cloud: Any = None, compute: Any = None,
           on_done: Callable[[Deletion], None] | None = None) -> list[Deletion]:
    """Delete what `find` listed, in its order; one failure does not stop the rest."""
    project = ctx.default_project
    cloud = cloud or make_cloud(ctx.settings)
    compute = compute or (make_compute(ctx.settings) if any(
        x.kind in ("disk", "snapshot") for x in leftovers) else None)
    done = []
    for x in sorted(leftovers, key=lambda x: _ORDER.index(x.kind)):
        try:
            if x.kind == "queued-resource":
                cloud.delete_queued_resource(project, x.zone, x.name)  # force: its node too
            elif x.kind == "node":
                cloud.delete_node(project, x.zone, x.name)
            elif x.kind in ("mig", "instance"):  # a MIG: its template and policy too
                _compute_tpus(cloud).delete_slice(project, x.zone, x.name)
            elif x.kind == "instance-template":
                _compute_tpus(cloud).delete_template(project, x.name)
            elif x.kind == "workload-policy":
                _compute_tpus(cloud).delete_workload_policy(project, x.zone.rsplit("-", 1)[0], x.name)
            elif x.kind == "disk":
                compute.delete_disk(project, x.zone, x.name)
            else:
                compute.delete_snapshot(project, x.name)
            result = Deletion(x)
        except TpujobError as exc:
            result = Deletion(x, exc.message)
        done.append(result)
        if on_done:
            on_done(result)
    return done


class _Owners:
    """Who owns a labelled resource, from this store's jobs: why it is a leftover, or None."""

    def __init__(self, ctx: Context):
        self.me = store_id(ctx.engine)
        self.tag = store_tag(self.me)
        self.jobs = {format_job_id(j.id): j for j in ctx.store.list_jobs(include_ended=True)}

    def why(self, labels: dict, kind: str, name: str) -> str | None:
        job_ref = labels.get(JOB_LABEL)
        if not job_ref or not self._mine(labels, kind, name):
            return None  # not tpujob's, or another store's: never touched
        job = self.jobs.get(job_ref)
        if job is None:
            return f"job {job_ref} is not in this store (deleted)"
        if State(job.state) in ACTIVE or _kept(job, kind):
            return None
        return f"job {job_ref} ended ({job.state})"

    def _mine(self, labels: dict, kind: str, name: str) -> bool:
        """Labelled with this store's id; a workload policy (no labels of its own, none taken
        from a template left behind) by the tag in its name."""
        if STORE_LABEL in labels:
            return bool(labels[STORE_LABEL] == self.me)
        named = SLICE_NAME.match(name)
        return kind == "workload-policy" and named is not None and named.group("store") == self.tag


def _compute_tpus(cloud) -> Any:
    """The Compute Engine TPU path of a TpuApis (tpujob.cloud.apis)."""
    return cloud.for_api(catalogue.COMPUTE)


def _tpu_resources(cloud, project: str, zone: str) -> list:
    """Both APIs' TPU resources of the zone. Compute Engine's are always asked for: gc lists
    disks through Compute Engine already, and a lost store's slices on that path (its jobs gone
    from any store) would otherwise never be found. A cloud of the TPU API alone (not a
    TpuApis) has only that API's."""
    from tpujob.cloud.apis import TpuApis

    found = list(cloud.list_tpu_resources(project, zone))
    if isinstance(cloud, TpuApis):
        found += _compute_tpus(cloud).list_tpu_resources(project, zone)
    return found


def _kept(job, kind: str) -> bool:
    """What an ended job keeps by the user's wish: its slice (`create --keep-slice`), its clones
    and their snapshots (a disk with `keep: true`)."""
    if kind in ("queued-resource", *COMPUTE_KINDS, "node"):
        return bool(job.keep_slice)
    from tpujob.spec.stored import spec_of

    return any(d.keep for d in spec_of(job).spec.disks)


def _leftover(kind, name, zone, labels, why, state, created, now, cost) -> Leftover:
    return Leftover(kind, name, zone, labels.get(JOB_LABEL, ""), labels.get(STORE_LABEL, ""), why,
                    state, None if created is None else round(now - created, 1), cost)


def _slice_cost(r) -> float | None:
    """A node's price per hour; a queued resource costs nothing itself (its node is billed)."""
    if r.kind in ("queued-resource", "instance-template", "workload-policy"):
        return 0.0
    try:
        return catalogue.accelerator(r.accelerator_type or "").hourly_cost(spot=r.spot)
    except TpujobError:
        return None


def collect(ctx: Context, zones: list[str] | None = None, remove: bool = False,
            on_done: Callable[[Deletion], None] | None = None) -> tuple[list[Leftover], list[Deletion]]:
    """`tpujob gc`: the leftovers, and, with `remove`, each one's deletion."""
    zones = list(zones or [])
    check_options(ctx, zones)  # before a client is made (the emulator started)
    cloud, compute = make_cloud(ctx.settings), make_compute(ctx.settings)
    found = find(ctx, zones, cloud=cloud, compute=compute)
    return found, (delete(ctx, found, cloud=cloud, compute=compute, on_done=on_done)
                   if remove else [])
