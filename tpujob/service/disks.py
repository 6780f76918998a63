"""Disks by hand: `tpujob disk snapshot|clone|list|delete`, the dev-slice side of the
clone-and-scale workflow (a job's own disks: attempt/slice_disks.py)."""

from __future__ import annotations

from tpujob.clients import make_compute
from tpujob.errors import UsageError
from tpujob.service.context import Context
from tpujob.spec import RESOURCE_NAME


def _where(ctx: Context, zone: str | None) -> tuple[str, str]:
    project, zone = ctx.settings.effective_project, zone or ctx.settings.zone
    if not project or not zone:
        raise UsageError("no project or zone: `tpujob config set project ID` and `... zone ZONE`")
    return project, zone


def _name(value: str) -> str:
    if not RESOURCE_NAME.match(value):
        raise UsageError(f"{value!r} is not a valid disk or snapshot name")
    return value


def snapshot(ctx: Context, disk: str, name: str | None = None, zone: str | None = None):
    project, zone = _where(ctx, zone)
    return make_compute(ctx.settings).create_snapshot(project, zone, _name(disk),
                                                      _name(name or f"{disk}-snap"))


def clone(ctx: Context, snapshot_name: str, name: str | None = None, disk_type: str = "pd-balanced",
          zone: str | None = None):
    from tpujob.catalogue import NEVER_READ_ONLY

    if disk_type in NEVER_READ_ONLY:  # a clone is for many hosts, read-only
        raise UsageError(f"{NEVER_READ_ONLY[disk_type]} Clone to hyperdisk-ml (or pd-balanced) instead")
    project, zone = _where(ctx, zone)
    return make_compute(ctx.settings).create_disk(project, zone, _name(name or f"{snapshot_name}-clone"),
                                                  disk_type=disk_type, snapshot=_name(snapshot_name),
                                                  read_only=True)  # a clone: for many hosts


def list_disks(ctx: Context, zone: str | None = None):
    project, zone = _where(ctx, zone)
    return make_compute(ctx.settings).list_disks(project, zone)


def delete(ctx: Context, name: str, zone: str | None = None) -> None:
    project, zone = _where(ctx, zone)
    make_compute(ctx.settings).delete_disk(project, zone, _name(name))
