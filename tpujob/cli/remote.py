"""Commands that reach a job's hosts: logs, exec, ssh."""

from __future__ import annotations

import sys

import typer

from tpujob.cli import context


def _out(data: bytes) -> None:
    typer.echo(data, nl=False)


def _err(data: bytes) -> None:
    typer.echo(data, nl=False, err=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def logs(job: str = typer.Argument(..., help="Job id or name."),
             host: int = typer.Option(0, "--host", help="Host index (0 is the coordinator)."),
             follow: bool = typer.Option(False, "--follow", "-f",
                                         help="Keep printing until the program ends (or Ctrl-C)."),
             attempt: int | None = typer.Option(None, "--attempt",
                                                   help="Attempt number (default: the current one).")):
        """Print the program's log from one host, read over SSH.

        When the slice is gone or the host cannot be reached, tpujob's local log of that host
        (setup and launch output) is printed instead, with a note on stderr."""
        from tpujob.service import remote

        try:
            remote.logs(context(), job, host=host, attempt=attempt, follow=follow, out=_out,
                        notice=lambda line: typer.echo(f"note: {line}", err=True))
        except KeyboardInterrupt:   # the usual way to stop following
            raise typer.Exit(130) from None

    @app.command("exec")
    def exec_(job: str = typer.Argument(..., help="Job id or name."),
              command: list[str] = typer.Argument(..., metavar="-- COMMAND [ARG...]",
                                                  help="The command and its arguments, after `--`."),
              host: int | None = typer.Option(None, "--host", help="Only this host index.")):
        """Run a command on every host of the job's slice at once; each output line is
        prefixed `[host K] `.

        The words after `--` reach the host exactly as given (no remote shell expansion: use
        `-- bash -c '...'` for pipes or variables). Exit status: the highest exit code of the
        hosts (0 when all succeeded), 255 when a host could not be reached."""
        from tpujob.service import remote

        outcomes = remote.exec_command(context(), job, command, host=host, out=_out, err=_err)
        failed = [o for o in outcomes if o.exit_code != 0]
        for o in failed:
            what = f"exit code {o.exit_code}" if o.exit_code is not None else o.error
            typer.echo(f"tpujob exec: host {o.index}: {what}", err=True)
        raise typer.Exit(remote.exit_status(outcomes))

    @app.command()
    def ssh(job: str = typer.Argument(..., help="Job id or name."),
            host: int = typer.Option(0, "--host", help="Host index.")):
        """Open a shell on one host of the job's slice (host key verified).

        With a terminal: an interactive shell. Otherwise the shell reads commands from stdin
        (`echo hostname | tpujob ssh JOB`). Exits with the shell's exit status."""
        from tpujob.service import remote

        sys.stdout.flush()
        code = remote.shell(context(), job, host=host, stdin=sys.stdin.buffer,
                            stdout=sys.stdout.buffer, stderr=sys.stderr.buffer)
        raise typer.Exit(code)
