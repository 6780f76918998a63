"""`tpujob init [PATH] [--accelerator ACC] [--force]`: a starter spec for the user's program."""

from __future__ import annotations

import shlex

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def init(path: str | None = typer.Argument(None, help="Where to write it (default: job.yaml; "
                                                  "a directory gets job.yaml in it)."),
             accelerator: str | None = typer.Option(None, "--accelerator",
                                                       help="Accelerator type (default: v4-8)."),
             force: bool = typer.Option(False, "--force", help="Overwrite an existing file.")):
        """Write a commented starter job spec for your own program.

        It names the accelerator with its generation's default runtime version and disk type,
        a zone that offers it, your command (`python train.py`), a run dir and the re-queue
        defaults. Refuses to overwrite a file (exit 4) unless --force."""
        from tpujob.service import starter

        made = starter.write(path, accelerator, force=force)
        acc = made.accelerator
        hosts = f"{acc.hosts} host{'s' if acc.hosts > 1 else ''}"
        verb = "overwrote" if made.overwrote else "wrote"
        typer.echo(f"{verb} {made.path}: job {made.name}, {acc.name} ({hosts}, {acc.chips} chips) in {made.zone}")
        typer.echo(f"next: change the lines marked `change:` (your command, run_dir, zone), then "
                   f"`tpujob validate {shlex.quote(str(made.path))}`")
