"""`tpujob notify test JOB`."""

from __future__ import annotations

import typer

from tpujob.cli import render


def register(app: typer.Typer) -> None:
    notify = typer.Typer(help="Notifications of a job's state moves (the spec's notify list).",
                         no_args_is_help=True)
    app.add_typer(notify, name="notify")

    @notify.command("test")
    def test(job: str = typer.Argument(..., help="Job id or name."),
             json_out: bool = typer.Option(False, "--json")):
        """Send a test message to each of the job's channels now; exit 0 when every one took it,
        5 when any failed."""
        from tpujob.cli import context
        from tpujob.errors import EXIT_CLOUD
        from tpujob.service import notify as notify_service

        _, outcomes = notify_service.send_test(context(), job)
        if json_out:
            render.print_json([{"channel": f"notify[{o.channel}]", "target": o.target,
                                "sent": o.sent, "error": o.error or None} for o in outcomes])
        else:
            for o in outcomes:
                typer.echo(f"notify[{o.channel}]  {o.target}: " + ("sent" if o.sent else f"failed: {o.error}"))
        if not all(o.sent for o in outcomes):
            raise typer.Exit(EXIT_CLOUD)
