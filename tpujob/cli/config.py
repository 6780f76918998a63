"""`tpujob config show | set KEY VALUE`."""

from __future__ import annotations

import typer

from tpujob.cli import render


def register(app: typer.Typer) -> None:
    config = typer.Typer(help="Show or change settings ($TPUJOB_HOME/config.yaml; TPUJOB_* override).",
                         no_args_is_help=True)
    app.add_typer(config, name="config")

    @config.command("show")
    def show(json_out: bool = typer.Option(False, "--json")):
        """Print the effective settings."""
        from tpujob import settings

        current = settings.load()
        data = settings.as_dict(current) | {"home": str(current.home),
                                            "database_url": settings.redact_url(current.database_url)}
        if json_out:
            render.print_json(data)
            return
        for key, value in data.items():
            typer.echo(f"{(key + ':').ljust(15)} {value}")

    @config.command("set")
    def set_(key: str, value: str):
        """Set one setting (cloud, project, zone, ssh_user, db_url, ssh_host_keys, ssh_os_login, smtp_host, smtp_port,
        smtp_from, smtp_starttls, smtp_username, user)."""
        from tpujob import settings

        settings.set_value(key, value)
        typer.echo(f"{key} = {settings.redact_url(value) if key == 'db_url' else value}")
