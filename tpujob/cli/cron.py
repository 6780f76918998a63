"""`tpujob cron install|remove|show`: the crontab line that runs `requeue` unattended."""

from __future__ import annotations

import typer

from tpujob.cli import render


def register(app: typer.Typer) -> None:
    cron_app = typer.Typer(help="Run `tpujob requeue` from cron (one line per store, with a lock).",
                           no_args_is_help=True)
    app.add_typer(cron_app, name="cron")

    @cron_app.command()
    def install(every: str = typer.Option("5m", "--every", help="How often: 1m-59m or 1h-23h.")):
        """Add (or replace) the crontab line that sweeps this store's jobs."""
        from tpujob.service import cron
        from tpujob.settings import redact_urls_in

        entry = cron.install(every)
        # A line installed by an older version may still hold a URL's password: never shown.
        typer.echo(redact_urls_in(entry.line))
        typer.echo(f"installed: sweeps run {every} apart; output goes to {entry.log_path}")
        if entry.env_text:
            typer.echo(f"the store's URL, password included, is in {entry.env_file} (mode 600), not the crontab")

    @cron_app.command()
    def remove():
        """Remove this store's crontab line (other lines are kept)."""
        from tpujob.service import cron

        typer.echo("removed" if cron.remove() else "no tpujob line in the crontab: nothing to remove")

    @cron_app.command()
    def show(json_out: bool = typer.Option(False, "--json")):
        """Print this store's crontab line and the last lines of its log."""
        from tpujob.service import cron
        from tpujob.settings import redact_urls_in

        line, log = cron.installed(), cron.last_log_lines()
        line = redact_urls_in(line) if line is not None else None
        if json_out:
            render.print_json({"line": line, "log_tail": log})
            return
        typer.echo(line if line is not None else "no tpujob line in the crontab (`tpujob cron install` adds one)")
        if log:
            typer.echo("\nlast sweeps:")
            for text in log:
                typer.echo(f"  {text}")
