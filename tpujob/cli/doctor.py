"""`tpujob doctor`: the checklist, rendered for people or as JSON."""

from __future__ import annotations

import typer

from tpujob.cli import render

_MARK = {"ok": "ok", "warning": "warning", "error": "ERROR"}


def register(app: typer.Typer) -> None:
    @app.command()
    def doctor(json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON.")):
        """Check this machine, the store and the cloud before (and after) a job goes wrong: each
        line is ok, warning or error, with the command that fixes it. Exits 6 when any check is
        an error, 0 otherwise (warnings included)."""
        from tpujob.errors import ConfigError
        from tpujob.service import doctor as doctor_mod
        from tpujob.service.context import Context

        ctx = Context.load()
        report = doctor_mod.run(ctx)
        if json_out:
            render.print_json(report.to_json_dict())
        else:
            for title, checks in (("local", report.local), (f"cloud ({ctx.settings.cloud})", report.cloud)):
                typer.echo(f"{title}:")
                width = max(len(c.name) for c in checks)
                for check in checks:
                    typer.echo(f"  {_MARK[check.status]:<8}{check.name:<{width + 2}}{check.detail}")
                    if check.fix:
                        typer.echo(f"  {'':<8}{'':<{width + 2}}fix: {check.fix}")
        if report.errors:
            names = ", ".join(c.name for c in report.errors)
            raise ConfigError(f"{len(report.errors)} check{'s' if len(report.errors) > 1 else ''} "
                              f"failed: {names}")
