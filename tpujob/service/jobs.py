"""Job use cases over the store: validate, plan, create, list, show, cancel, delete, clean."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tpujob import spec as spec_mod
from tpujob.errors import ConflictError
from tpujob.service.context import Context
from tpujob.spec import ResolvedSpec
from tpujob.store.repository import format_job_id, slice_name
from tpujob.store.states import ENDED, State


def validate(ctx: Context, path: str) -> ResolvedSpec:
    resolved, _ = spec_mod.load(path, default_zone=ctx.settings.zone,
                                default_project=ctx.settings.effective_project)
    return resolved


@dataclass(frozen=True)
class PlanStep:
    action: str
    resource: str
    detail: str


def plan(resolved: ResolvedSpec, job_id: int | None = None) -> list[PlanStep]:
    """The resources a create makes, in order, with their names (job id unknown on --dry-run)."""
    spec = resolved.spec
    jid = format_job_id(job_id) if job_id is not None else "NNNNNN"
    node = slice_name(job_id, 1) if job_id is not None else f"tpujob-{jid}-1"
    steps: list[PlanStep] = []
    for disk in spec.disks:
        kind = resolved.disk_types[disk.name]
        if disk.source_disk:
            steps.append(PlanStep("snapshot", f"{disk.name}-src-{jid}", f"of disk {disk.source_disk}"))
            steps.append(PlanStep("create disk", disk.name, f"{kind}, clone of that snapshot"))
        elif disk.snapshot:
            steps.append(PlanStep("create disk", disk.name, f"{kind}, clone of snapshot {disk.snapshot}"))
        else:
            steps.append(PlanStep("use disk", disk.name, f"{kind}, existing or new ({disk.size_gb or 'default'} GB)"))
    how = "queued resource" if spec.tpu.queued else "node"
    steps.append(PlanStep(f"create {how}", node,
                          f"{resolved.accelerator} ({resolved.hosts} hosts, {resolved.chips} chips), "
                          f"{spec.tpu.provisioning}, {resolved.runtime_version}, {resolved.zone}"))
    for disk in spec.disks:
        steps.append(PlanStep("attach", disk.name, f"{disk.mode} at {disk.mount} on every host"))
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


def create(ctx: Context, path: str, *, keep_slice: bool = False):
    """Record the job (PENDING). Nothing is written when the spec is refused."""
    resolved, text = spec_mod.load(path, default_zone=ctx.settings.zone,
                                   default_project=ctx.settings.effective_project)
    job = ctx.store.add_job(
        name=resolved.spec.name, spec_yaml=text, spec_json=json.dumps(resolved.to_json_dict()),
        accelerator=resolved.accelerator, zone=resolved.zone, project=resolved.project,
        cloud=ctx.settings.cloud, keep_slice=keep_slice,
    )
    return job, resolved


def list_jobs(ctx: Context, include_ended: bool = False):
    return ctx.store.list_jobs(include_ended=include_ended)


@dataclass
class JobDetail:
    job: object
    attempts: list
    events: list


def show(ctx: Context, ref: str) -> JobDetail:
    job = ctx.store.find(ref)
    return JobDetail(job, ctx.store.attempts(job.id), ctx.store.events(job.id))


def cancel(ctx: Context, ref: str):
    job = ctx.store.find(ref)
    state = State(job.state)
    if state in ENDED:
        raise ConflictError(f"job {format_job_id(job.id)} is {state.value}: nothing to cancel")
    with ctx.lease(job.id) as owner:
        return ctx.store.transition(job.id, state, State.CANCELLED, "cancelled by user", owner=owner)


def delete(ctx: Context, ref: str):
    job = ctx.store.find(ref)
    state = State(job.state)
    if state == State.DELETED:
        return job
    with ctx.lease(job.id) as owner:
        return ctx.store.transition(job.id, state, State.DELETED, "deleted by user", owner=owner)


def logs_dir(ctx: Context, job_id: int) -> Path:
    return ctx.settings.home / "logs" / format_job_id(job_id)


def clean(ctx: Context, ref: str) -> int:
    """Delete the job's resources, remove its logs, then forget its record."""
    job = delete(ctx, ref)
    shutil.rmtree(logs_dir(ctx, job.id), ignore_errors=True)
    ctx.store.remove(job.id)
    return job.id
