"""`tpujob demo`: run the example job on the local emulator and show what tpujob recorded."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(spec: str | None = typer.Option(None, "--spec", help="Job spec to run (default: the "
                                                "example shipped with tpujob, jobs.example.yaml)."),
             timeout: float = typer.Option(600.0, help="Seconds to follow the job before giving up.")):
        """Run the example job on the local TPU emulator, start to finish (no Google account).

        Starts the emulator if needed, creates the job, follows it to its end with progress
        on stderr, then prints `tpujob list --all` and `tpujob show` of the job. Exits 0 when
        the job SUCCEEDED."""
        from tpujob.cli.jobs import follow_job, raise_unless_succeeded
        from tpujob.names import format_job_id
        from tpujob.service import demo as demo_mod
        from tpujob.service.context import Context

        ctx = Context.load()
        run = demo_mod.start(ctx, spec)
        how = "started" if run.started_emulator else "already running"
        typer.echo(f"emulator {how} ({run.tpu_endpoint})", err=True)
        jid = format_job_id(run.job.id)
        typer.echo(f"job {jid} ({run.job.name}) recorded from {run.spec}", err=True)
        job = follow_job(ctx, run.job.id, wait=True, timeout=timeout, quiet=False)
        for args in (["list", "--all"], ["show", jid]):
            typer.echo(f"\n$ tpujob {' '.join(args)}")
            app(args=args, prog_name="tpujob", standalone_mode=False)
        typer.echo("\nThe emulator keeps running (its slices, disks and buckets with it) for the next "
                   "`tpujob` command; stop it with `tpujob emulator stop`.", err=True)
        raise_unless_succeeded(job, wait=True)
