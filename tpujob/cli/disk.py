"""`tpujob disk snapshot|clone|list|delete`: the master disk, its snapshots and clones."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    disk = typer.Typer(help="Persistent disks: snapshot a master, clone it for a pod.",
                       no_args_is_help=True)

    @disk.command("snapshot")
    def snapshot(name: str = typer.Argument(..., help="The disk to snapshot (e.g. the master)."),
                 snapshot_name: str | None = typer.Option(None, "--name", help="Default DISK-snap."),
                 zone: str | None = typer.Option(None, "--zone")) -> None:
        """Snapshot a disk (it may stay attached to its dev slice)."""
        from tpujob.service import disks
        from tpujob.service.context import Context

        snap = disks.snapshot(Context.load(), name, snapshot_name, zone)
        typer.echo(f"snapshot {snap.name} of disk {snap.source_disk}: {snap.status}")

    @disk.command("clone")
    def clone(snapshot: str = typer.Argument(..., help="The snapshot to clone."),
              name: str | None = typer.Option(None, "--name", help="Default SNAPSHOT-clone."),
              disk_type: str = typer.Option("pd-balanced", "--type"),
              zone: str | None = typer.Option(None, "--zone")) -> None:
        """Create a disk from a snapshot, to attach read-only to every host of a pod."""
        from tpujob.service import disks
        from tpujob.service.context import Context

        made = disks.clone(Context.load(), snapshot, name, disk_type, zone)
        typer.echo(f"disk {made.name} ({made.type}, {made.size_gb} GB) from snapshot {snapshot}")

    @disk.command("list")
    def list_(zone: str | None = typer.Option(None, "--zone"),
              as_json: bool = typer.Option(False, "--json")) -> None:
        """The zone's disks, with what they were made from and who uses them."""
        from tpujob.service import disks
        from tpujob.service.context import Context

        found = disks.list_disks(Context.load(), zone)
        if as_json:
            typer.echo(json.dumps([d.to_json_dict() for d in found], indent=2))
            return
        for d in found:
            source = d.source_snapshot and f"snapshot {d.source_snapshot}" or \
                d.source_disk and f"disk {d.source_disk}" or "-"
            typer.echo(f"{d.name:30} {d.type:13} {d.size_gb:>6} GB  {source:30} "
                       f"{','.join(d.users) or '-'}")

    @disk.command("delete")
    def delete(name: str = typer.Argument(...), zone: str | None = typer.Option(None, "--zone")) -> None:
        """Delete a disk (refused by the cloud while a node uses it)."""
        from tpujob.service import disks
        from tpujob.service.context import Context

        disks.delete(Context.load(), name, zone)
        typer.echo(f"deleted disk {name}")

    app.add_typer(disk, name="disk")
