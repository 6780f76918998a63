"""Job use cases over the store: validate, plan, create, show, cancel, delete, clean (list: listing.py)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from tpujob import spec as spec_mod
from tpujob.clients import make_cloud, make_compute, make_storage
from tpujob.errors import CloudError, ConflictError, OthersJob, TpujobError, UsageError
from tpujob.names import (
    attempt_nodes,
    clone_name,
    format_job_id,
    growing_nodes,
    local_log_dir,
    nodes_text,
    slice_name,
    snapshot_name,
)
from tpujob.reconcile.attempt_slices import attempt_slice, delete_attempt_slice
from tpujob.service.accounting import account
from tpujob.service.context import Context
from tpujob.service.ledger import Ledger, attempt_ledgers, job_ledger, price_of
from tpujob.service.quotas import QueueRow, place_of
from tpujob.service.timeline import timeline
from tpujob.spec import ResolvedSpec
from tpujob.spec.stored import api_of, spec_of
from tpujob.store.states import COUNTERS, ENDED, AttemptEnd, State

if TYPE_CHECKING:
    from tpujob.runtime.contract import RunDirStatus
    from tpujob.service.accounting import Accounting
    from tpujob.service.remote import HostProgram
    from tpujob.service.timeline import Timeline
    from tpujob.store.models import Attempt, Event, Job


def validate(ctx: Context, path: str) -> ResolvedSpec:
    resolved, _ = spec_mod.load(path, default_zone=ctx.settings.zone,
                                default_project=ctx.default_project)
    return resolved


def placement_warnings(resolved: ResolvedSpec, *, strict: bool = False) -> list[str]:
    """Each placement (the primary, then every fallback) whose zone does not offer its
    accelerator in Google's published zone table (tpujob.catalogue.ZONES): a warning each, since
    the table may lag Google's live list, or with `strict` a UsageError (exit 2). Then, on
    Compute Engine without external IPs, what the VMs' network needs (spec/compute_engine.network_hint)."""
    from tpujob.catalogue import placement_warning

    keys = ["tpu"] + [f"tpu.fallback[{i}]" for i in range(len(resolved.spec.tpu.fallback))]
    warnings = []
    for key, (accelerator, zone) in zip(keys, resolved.placements()):
        said = placement_warning(accelerator, zone)
        if said is None:
            continue
        message = f"{key}: {said}; Google would refuse the create"
        if strict:
            raise UsageError(message + " (refused with --strict)")
        warnings.append(message)
    from tpujob.spec.compute_engine import network_hint

    hint = network_hint(resolved.api, resolved.spec.tpu.network.external_ips)  # advice: never refused
    return warnings + ([hint] if hint else [])


@dataclass(frozen=True)
class PlanStep:
    action: str
    resource: str
    detail: str


def plan(resolved: ResolvedSpec, store: str | None = None, job_id: int | None = None) -> list[PlanStep]:
    """The resources a create makes, in order, with their names. On --dry-run the job id is
    unknown (shown NNNNNN) and the store is not opened, so its tag is shown SSSSSS (a real one
    is 6 hex digits, tpujob/names.py store_tag)."""
    spec = resolved.spec
    tag = store if store is not None else "SSSSSS"

    def named(name: str) -> str:  # on --dry-run, each name as job 0's, with its id shown NNNNNN
        return name if job_id is not None else name.replace(format_job_id(0), "NNNNNN")

    jid = job_id if job_id is not None else 0
    node = named(slice_name(jid, 1, tag))
    steps: list[PlanStep] = []
    # A clone is the job's own: NAME-JOBID.
    cloud_name = {d.name: named(clone_name(d.name, jid, tag)) if d.source_disk or d.snapshot else d.name
                  for d in spec.disks}
    for disk in spec.disks:
        kind = resolved.disk_types[disk.name]
        if disk.source_disk:
            steps.append(PlanStep("snapshot", named(snapshot_name(disk.name, jid, tag)),
                                  f"of disk {disk.source_disk}"))
            steps.append(PlanStep("create disk", cloud_name[disk.name], f"{kind}, clone of that snapshot"))
        elif disk.snapshot:
            steps.append(PlanStep("create disk", cloud_name[disk.name], f"{kind}, clone of snapshot {disk.snapshot}"))
        elif disk.mode == "read-only":
            steps.append(PlanStep("use disk", disk.name, "existing, read-only"))
        else:
            steps.append(PlanStep("use disk", disk.name, f"{kind}, existing or new ({disk.size_gb or 'default'} GB)"))
    nodes = "node" if resolved.slices == 1 else f"{resolved.slices} nodes"
    how = f"queued resource ({nodes})" if spec.tpu.queued and resolved.slices > 1 else (
        "queued resource" if spec.tpu.queued else nodes)
    steps.append(PlanStep(f"create {how}", nodes_text(node, resolved.slices),
                          f"{resolved.accelerator} ({resolved.hosts} hosts, {resolved.chips} chips"
                          f"{' each' if resolved.slices > 1 else ''}), "
                          f"{spec.tpu.provisioning}, {resolved.runtime_version}, {resolved.zone}"))
    for disk in spec.disks:
        steps.append(PlanStep("attach", cloud_name[disk.name], f"{disk.mode} at {disk.mount} on every host"))
    for bucket in spec.buckets:
        ro = "read-only" if bucket.read_only else "read-write"
        steps.append(PlanStep("mount bucket", bucket.bucket, f"gcsfuse {ro} at {bucket.mount}"))
    if resolved.sync_path:
        steps.append(PlanStep("sync", resolved.sync_path, "to every host"))
    if spec.setup:
        steps.append(PlanStep("setup", "every host", "once per attempt"))
    program = "bundled runtime" if spec.run.runtime is not None else "run.command"
    steps.append(PlanStep("launch", "every host", program))
    return steps


def record(ctx: Context, path: str, *, keep_slice: bool = False):
    """Record the job as PENDING, or QUEUED when one of the lab's quotas covers it (the sweep
    admits it: docs/scheduler.md): the next sweep (or `create`, following it) starts it.
    Nothing is written when the spec is refused."""
    resolved, text = spec_mod.load(path, default_zone=ctx.settings.zone,
                                   default_project=ctx.default_project)
    from tpujob.owners import current_user, this_node
    from tpujob.reconcile.scheduling import covered

    why = ""
    if resolved.spec.tpu.placement == "auto" and len(resolved.placements()) > 1:
        resolved, why = _auto_placement(ctx, resolved)
    accelerator, zone = resolved.placements()[0]
    job = ctx.store.add_job(
        name=resolved.spec.name, spec_yaml=text, spec_json=json.dumps(resolved.to_json_dict()),
        accelerator=accelerator, zone=zone, project=resolved.project,
        cloud=ctx.settings.cloud, keep_slice=keep_slice,
        owner=current_user(ctx.settings), from_node=this_node(),
        priority=resolved.spec.priority, queued=covered(ctx.store, resolved),
    )
    if why:
        ctx.store.add_event(job.id, "placement", why)
    return job, resolved


def _auto_placement(ctx: Context, resolved: ResolvedSpec) -> tuple[ResolvedSpec, str]:
    """`placement: auto`: the placements by expected goodput per dollar from the store's
    history, and the event that says the order and what it rests on."""
    from tpujob.durations import duration_text
    from tpujob.service.goodput import auto_placement

    written = resolved.placements()
    ranked = auto_placement(ctx, written, resolved.provisioning)
    said = "; ".join(f"{written[c.index][1]} ({written[c.index][0]}): MTBI {duration_text(c.mtbi)} from "
                     f"{c.evidence.runs} runs, {c.evidence.interruptions} interruptions" for c in ranked)
    cold = not any(c.evidence.requests for c in ranked)
    why = ("placement auto: no history yet, the spec's order" if cold
           else f"placement auto, best first by expected goodput per dollar: {said}")
    return resolved.model_copy(update={"placement_order": tuple(c.index for c in ranked)}), why


class Created(NamedTuple):
    job: Job
    resolved: ResolvedSpec
    findings: list  # lint.Finding in the sync directory, for the caller to show


def lint_sync(resolved: ResolvedSpec, *, strict: bool = False) -> list:
    """Lint the job's local sync directory (nothing to do without one). With `strict`, an
    error-level finding refuses the job (LintBlocked, exit 2)."""
    if not resolved.sync_path:
        return []
    from tpujob.lint import LintBlocked, errors, lint_sync_dir

    findings = lint_sync_dir(resolved.sync_path, accelerator=resolved.accelerator)
    if strict and errors(findings):
        raise LintBlocked(findings, f"the sync directory {resolved.sync_path}")
    return findings


def check_existing_disks(ctx: Context, resolved: ResolvedSpec) -> None:
    """The read-only disks the job does not clone, and the clones' snapshots and masters, must
    exist (NotFoundError, exit 3, names the first missing one and the command that makes it):
    one Compute get each; no client at all when the spec has none."""
    from tpujob.attempt import slice_disks as disks

    if disks.sourced_disks(resolved):
        disks.check_existing_disks(make_compute(ctx.settings), resolved)


def create(ctx: Context, path: str, *, keep_slice: bool = False, strict: bool = False,
           warn: Callable[[str], None] = lambda message: None) -> Created:
    """Validate, lint the sync directory, check that the spec's secrets have values and that
    the cloud can be reached with the credentials at hand, then record. A refused spec, a
    --strict lint error, a missing secret or missing credentials write nothing. A bucket in
    another region than the slice, or a placement Google's zone table does not list, is a
    `warn`ing, refused with `strict`."""
    from tpujob.attempt import buckets
    from tpujob.attempt import slice_disks as disks

    resolved = validate(ctx, path)
    for message in placement_warnings(resolved, strict=strict):
        warn(message)
    findings = lint_sync(resolved, strict=strict)  # local work: before the cloud is touched
    # The first setup needs the secrets' values, the first notification its webhook's: refuse now.
    named = resolved.spec.secrets + spec_mod.webhook_secrets(resolved.spec)
    if named:
        from tpujob.attempt.secrets import resolve

        resolve(named)
    from tpujob.service.keep_alive import check_follow_settings

    check_follow_settings()  # before the cloud (or the emulator) is started
    make_cloud(ctx.settings)
    check_existing_disks(ctx, resolved)
    if resolved.spec.disks:  # a master held read-write by a dev slice: refused before spending
        disks.check_disks(make_compute(ctx.settings), resolved)
    if resolved.spec.buckets or resolved.spec.run_dir:
        from tpujob.cloud.gcs import Gcs

        gcs = Gcs(make_storage(ctx.settings))
        for message in buckets.check_bucket_regions(gcs, resolved, strict, ctx.settings.cloud):
            warn(message)
    job, resolved = record(ctx, path, keep_slice=keep_slice)
    return Created(job, resolved, findings)


@dataclass
class JobDetail:
    job: Job
    attempts: list[Attempt]
    events: list[Event]
    accounting: Accounting      # the night's story in numbers
    timeline: Timeline          # the same story as bars
    ledger: Ledger              # where the wall time and dollars went, per bucket
    attempt_ledgers: list[tuple[int, Ledger]]  # the same, per attempt (its number)
    hosts: list[HostProgram] | None = None  # one per host, while the program runs
    hosts_error: str = ""       # why the hosts could not be asked
    run_dir: RunDirStatus | None = None  # the current attempt's status.json, heartbeat
    run_dir_error: str = ""     # why the run dir could not be read
    queue: QueueRow | None = None  # a QUEUED job's reason, place and estimated start (`tpujob queue`'s)


def show(ctx: Context, ref: str) -> JobDetail:
    """The job's record; its run dir on GCS (status.json, heartbeat age: how the current
    attempt's program is doing, without SSH); while it is SETTING_UP or RUNNING, each host's
    view of the program too (over SSH)."""
    job = ctx.store.find(ref)
    attempts, events = ctx.store.attempts(job.id), ctx.store.events(job.id)
    now = ctx.store.clock()  # the store's: the records' timestamps are on it
    spec = spec_of(job)
    price = price_of(spec.spec.tpu.provisioning)
    detail = JobDetail(job, attempts, events, account(job, attempts, events, now),
                       timeline(job, attempts, events, now), job_ledger(job, attempts, events, now, price),
                       attempt_ledgers(job, attempts, events, now, price))
    detail.queue = place_of(ctx, job)
    if detail.attempts and spec.spec.run_dir:
        from tpujob.attempt import run_dirs
        from tpujob.cloud.gcs import Gcs

        try:
            gcs = Gcs(make_storage(ctx.settings, start_emulator=False))
            # The heartbeat's age on the storage service's clock, which wrote its `updated`.
            detail.run_dir = run_dirs.read_run_dir(gcs, spec, job.id, detail.attempts[-1].started_at, gcs.now())
        except TpujobError as exc:
            detail.run_dir_error = exc.message
    if State(job.state) in (State.SETTING_UP, State.RUNNING):
        from tpujob.service.remote import host_status

        try:
            detail.hosts = host_status(ctx, job)
        except TpujobError as exc:
            detail.hosts_error = exc.message
    return detail


def _stop_program(ctx: Context, job, cloud) -> None:
    """Stop the current attempt's program where its slice is READY, then unmount the job's
    disks and buckets there. CloudError (nothing recorded) when a host of a READY slice failed
    to stop it; a slice that is gone, or went away meanwhile, has no program left to stop.
    The steps are SshHostOps' (stop_program, unmount), as the sweep's are (reconcile/act.py); only the
    policy differs, on purpose: here a failed stop refuses the cancel, there it is an event."""
    from tpujob.attempt.hosts import SshHostOps
    from tpujob.cloud.base import SlicePhase

    attempt = ctx.store.current_attempt(job.id)
    if attempt is None or attempt.ended_at is not None:
        return
    slice_ = attempt_slice(cloud, job, attempt)
    if slice_.phase != SlicePhase.READY:
        return
    ops = SshHostOps(ctx, cloud)
    try:
        ops.stop_program(job, attempt, slice_)
    except CloudError:
        if attempt_slice(cloud, job, attempt).phase == SlicePhase.READY:
            raise
        return  # preempted or deleted while we stopped it: its hosts took the program with them
    try:
        ops.unmount(job, attempt, slice_)
    except TpujobError as exc:  # the program is stopped: a mount left behind is not worth refusing
        ctx.store.add_event(job.id, "hosts", f"unmount failed: {exc}")


def check_owner(ctx: Context, job, action: str, force: bool) -> None:
    """Another user's job is cancelled or deleted only with `force` (OthersJob, exit 4, nothing
    changed): a lab's convention against acting on a neighbour's job by mistake, not a security
    boundary (tpujob/owners.py). A job recorded before owners were kept is nobody's."""
    from tpujob.owners import current_user, is_others

    if not force and is_others(job.owner, ctx.settings):
        raise OthersJob(f"job {format_job_id(job.id)} is {job.owner}'s, not {current_user(ctx.settings)}'s: "
                        f"{action} it with --force")


def cancel(ctx: Context, ref: str, *, force: bool = False):
    """Stop the program on every host and keep the slice; `resume` runs it again. When a host
    fails to stop it, CloudError and the job stays as it was. Another user's job only with
    `force` (check_owner)."""
    job = ctx.store.find(ref)
    check_owner(ctx, job, "cancel", force)
    if State(job.state) in ENDED:
        raise ConflictError(f"job {format_job_id(job.id)} is {job.state}: nothing to cancel")
    with ctx.lease(job.id) as owner:
        job = ctx.store.get(job.id)
        if job.attempt:
            try:
                _stop_program(ctx, job, make_cloud(ctx.settings))
            except CloudError as exc:
                raise CloudError(f"job {format_job_id(job.id)} not cancelled (still {job.state}): {exc}") from exc
        with ctx.store.atomic():  # the attempt ends with the move, or neither happens
            if job.attempt:
                ctx.store.end_attempt(job.id, job.attempt, AttemptEnd.CANCELLED)
            return ctx.store.transition(job.id, State(job.state), State.CANCELLED, "cancelled by user", owner=owner)


def delete(ctx: Context, ref: str, *, force: bool = False):
    """Stop the program, delete every slice and queued resource of the job; keep the record.
    Another user's job only with `force` (check_owner)."""
    job = ctx.store.find(ref)
    check_owner(ctx, job, "delete", force)
    with ctx.lease(job.id) as owner:
        job = ctx.store.get(job.id)
        attempts = ctx.store.attempts(job.id)
        if attempts:
            cloud = make_cloud(ctx.settings)
            if State(job.state) not in ENDED:
                try:
                    _stop_program(ctx, job, cloud)
                except TpujobError as exc:
                    ctx.store.add_event(job.id, "hosts", f"stop failed, deleting anyway: {exc}")
            # Every attempt's slice, not just the current one: nothing is left behind.
            for zone in sorted({a.zone for a in attempts}):
                listed = set(cloud.for_api(api_of(job)).list_slices(job.project, zone))
                for a in sorted((a for a in attempts if a.zone == zone), key=lambda a: a.slice_name):
                    if listed & {a.slice_name, *attempt_nodes(a), *growing_nodes(a)}:
                        delete_attempt_slice(cloud, ctx.store, job, a)
            _delete_clones(ctx, job, attempts)
        with ctx.store.atomic():  # the attempt ends with the move, or neither happens
            if attempts:
                ctx.store.end_attempt(job.id, job.attempt, AttemptEnd.DELETED)
            if job.state == State.DELETED.value:
                return job
            return ctx.store.transition(job.id, State(job.state), State.DELETED, "deleted by user", owner=owner)


def _delete_clones(ctx: Context, job, attempts) -> None:
    """The job's disk clones and their snapshots go with its slices (unless `keep: true`)."""
    spec = spec_of(job)
    if not spec.spec.disks:
        return
    from tpujob.attempt import slice_disks as disks

    compute = make_compute(ctx.settings)
    for what in disks.delete_clones(compute, spec, job.id, {a.zone for a in attempts}, ctx.store.store_tag):
        ctx.store.add_event(job.id, "disk", f"deleted {what}")


def resume(ctx: Context, ref: str):
    """A new attempt of a failed or cancelled job (on its slice when that is still healthy).
    The retry budgets start again: the user has looked at the job and wants it to run."""
    job = ctx.store.find(ref)
    if State(job.state) not in (State.FAILED, State.CANCELLED):
        raise ConflictError(f"job {format_job_id(job.id)} is {job.state}: only FAILED or CANCELLED jobs resume")
    from tpujob.service.keep_alive import check_follow_settings

    check_follow_settings()  # `resume` follows the job: refused before it is moved
    with ctx.lease(job.id) as owner:
        job = ctx.store.get(job.id)
        message = (f"resumed by user (budgets reset; had {job.preemptions} preemptions, "
                   f"{job.failures} failures, {job.nan_restarts} NaN restarts)")
        # Every counter back to 0, and state_since backdated: a resume is not a retry, it need
        # not wait out the backoff.
        fields: dict[str, Any] = {**dict.fromkeys(COUNTERS, 0), "state_since": 0.0}
        if _queues_again(ctx, job):
            fields.pop("state_since")  # its place in the queue: from now
            return ctx.store.transition(job.id, State(job.state), State.QUEUED,
                                        message + "; waiting for the lab's quota", owner=owner, **fields)
        return ctx.store.transition(job.id, State(job.state), State.RECOVERING, message, owner=owner, **fields)


def _queues_again(ctx: Context, job) -> bool:
    """A resumed job whose slice is gone (so its chips are not held) goes back to the lab's queue
    when a quota covers it: resuming never goes past the quota (docs/scheduler.md)."""
    from tpujob.reconcile.scheduling import covered

    if job.id in {j.id for j in ctx.store.holding_jobs()}:
        return False
    return covered(ctx.store, spec_of(job))


def logs_dir(ctx: Context, job_id: int) -> Path:
    return ctx.settings.home / local_log_dir(job_id)


def clean(ctx: Context, ref: str, *, force: bool = False) -> int:
    """Delete the job's resources, remove its logs, then forget its record (another user's job
    only with `force`, as delete)."""
    check_owner(ctx, ctx.store.find(ref), "clean", force)
    job = delete(ctx, ref, force=True)
    shutil.rmtree(logs_dir(ctx, job.id), ignore_errors=True)
    ctx.store.remove(job.id)
    return job.id
