"""Keeping jobs alive: requeue (cron), watch (loop), resume."""

from __future__ import annotations

import time

import typer

from tpujob.cli import context, render
from tpujob.cli.jobs import follow_job, raise_unless_succeeded
from tpujob.names import format_job_id


def _print_report(report) -> None:
    # Dated: cron appends these lines to requeue.log, read the morning after.
    line = (f"{render.iso(time.time())} sweep: {report.jobs_seen} active, {report.jobs_acted} acted on, "
            f"{report.skipped_locked} locked elsewhere, {report.api_calls} API calls, {report.seconds:.2f} s")
    if report.setups_followed:
        line += (f"; followed {report.setups_followed} setup(s), {report.setups_ended} ended within --settle")
    typer.echo(line)
    for error in report.errors:
        typer.echo(f"  {error}", err=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def requeue(jobs_: list[str] | None = typer.Argument(None, metavar="[JOB]...",
                                                            help="Jobs to sweep (default: every active job)."),
                all_: bool = typer.Option(False, "--all", help="Every active job (the default)."),
                settle: float = typer.Option(0.0, "--settle", min=0.0, help=(
                    "Then follow the setups the sweep left running, for up to this many seconds, "
                    "and launch each program as its setup ends (the cron line sets it).")),
                json_out: bool = typer.Option(False, "--json")):
        """One sweep: observe every active job's slice, re-create what was preempted, record it all."""
        from tpujob.service import keep_alive

        report = keep_alive.requeue(context(), None if all_ else jobs_, settle=settle)
        if json_out:
            render.print_json(report.__dict__)
        else:
            _print_report(report)

    @app.command()
    def watch(interval: float = typer.Option(60.0, help="Seconds between sweeps."),
              count: int | None = typer.Option(None, help="Stop after this many sweeps.")):
        """Sweep in a loop in the foreground (for tmux or systemd); Ctrl-C stops it at once,
        SIGTERM (systemctl stop, kill) once the sweep under way has finished."""
        import signal
        import threading

        from tpujob.service import keep_alive

        stop = threading.Event()
        # A sweep cut short holds its jobs' leases until they expire (up to a host step's timeout):
        # stopping between sweeps lets the next sweeper, anywhere, act on them at once.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        keep_alive.watch(context(), interval, _print_report, max_sweeps=count, stop=stop)

    @app.command()
    def resume(job: str = typer.Argument(..., help="Job id or name."),
               wait: bool = typer.Option(False, "--wait", help="Follow the job to its end."),
               timeout: float = typer.Option(3600.0, help="Seconds to follow before returning.")):
        """Start a new attempt of a FAILED or CANCELLED job (new slice if needed)."""
        from tpujob.service import jobs

        ctx = context()
        resumed = jobs.resume(ctx, job)
        final = follow_job(ctx, resumed.id, wait=wait, timeout=timeout, quiet=False)
        typer.echo(f"job {format_job_id(final.id)} {final.state}"
                   + (f" ({final.end_reason})" if final.end_reason else ""))
        raise_unless_succeeded(final, wait)
