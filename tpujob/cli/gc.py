"""`tpujob gc`: list (and with --yes delete) cloud resources no active job of this store owns."""

from __future__ import annotations

import time

import typer

from tpujob.cli import render


def register(app: typer.Typer) -> None:
    @app.command()
    def gc(zone: list[str] | None = typer.Option(None, "--zone", help="A zone to look in "
                                                    "(repeatable); default: the zones of this "
                                                    "store's jobs and the zone setting."),
           yes: bool = typer.Option(False, "--yes", help="Delete what is listed."),
           json_out: bool = typer.Option(False, "--json", help="Print the list as JSON.")):
        """List this store's queued resources, nodes, disks and snapshots that no active job of
        it owns, with age and cost per hour; delete them with --yes. Unlabelled resources, and
        another store's, are never touched."""
        from tpujob.errors import CloudError
        from tpujob.service import gc as gc_mod
        from tpujob.service.context import Context

        def said(d) -> None:
            if not json_out:
                x = d.leftover
                where = f" in {x.zone}" if x.zone else ""
                typer.echo(f"deleted {x.kind} {x.name}{where}" if not d.error
                           else f"could not delete {x.kind} {x.name}{where}: {d.error}")

        found, deletions = gc_mod.collect(Context.load(), zone, remove=yes, on_done=said)
        failed = [d for d in deletions if d.error]
        if json_out:
            errors = {(d.leftover.kind, d.leftover.zone, d.leftover.name): d.error for d in deletions}
            rows = []
            for x in found:
                row = x.to_json_dict()
                if yes:
                    error = errors.get((x.kind, x.zone, x.name), "")
                    row.update(deleted=not error, error=error or None)
                rows.append(row)
            render.print_json(rows)
        elif not yes:
            _print_table(found)
        if failed:
            raise CloudError(f"{len(failed)} of {len(found)} could not be deleted "
                             f"(first: {failed[0].leftover.kind} {failed[0].leftover.name}: "
                             f"{failed[0].error})")


def _print_table(found) -> None:
    if not found:
        typer.echo("nothing to collect: every tpujob resource belongs to an active job")
        return
    rows = [[x.kind, x.name, x.zone or "global", x.job, _age(x.age_seconds), _cost(x.cost_per_hour_usd),
             x.why] for x in found]
    typer.echo(render.table(["KIND", "NAME", "ZONE", "JOB", "AGE", "USD/H", "WHY"], rows))
    total = sum(x.cost_per_hour_usd or 0 for x in found)
    typer.echo(f"{len(found)} leftover{'s' if len(found) != 1 else ''}, about ${total:.2f}/h; "
               "tpujob gc --yes deletes them")


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else render.age(time.time() - seconds)


def _cost(usd: float | None) -> str:
    return "unknown" if usd is None else f"{usd:.2f}"
