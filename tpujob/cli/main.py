"""Entry point: builds the app, maps typed errors to `error: <one line>` and exit codes."""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.main

from tpujob import settings
from tpujob.errors import EXIT_UNEXPECTED, EXIT_USAGE, TpujobError, expired_credentials

app = typer.Typer(
    name="tpujob",
    help="Run training jobs on preemptible Cloud TPU slices and keep them running.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show tracebacks.")):
    """Run training jobs on preemptible Cloud TPU slices and keep them running."""


def _register_all() -> None:
    # Each module imports only typer at the top; what a command needs is imported inside it.
    from tpujob.cli import (
        cache,
        config,
        cron,
        data,
        demo,
        disk,
        doctor,
        emulator,
        gc,
        goodput,
        jobs,
        keep_alive,
        lint,
        notify,
        quota,
        remote,
        starter,
        ui,
    )

    for module in (jobs, keep_alive, remote, disk, cron, lint, data, emulator, demo, starter, config,
                   doctor, notify, gc, ui, cache, goodput, quota):
        module.register(app)


_register_all()
_command: Any = None  # typer's own click Command (typer._click, a private module)


def _click_command() -> Any:
    """The click command typer builds from `app`, built once a process: `app(...)` builds it
    again at every call (about 7 ms, most of a `tpujob list`), which a process that runs
    several commands in turn (the test suite, thousands of them) paid each time."""
    global _command
    if _command is None:
        _command = typer.main.get_command(app)
    return _command


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or settings.debug()
    try:
        code = _click_command().main(args=argv, prog_name="tpujob", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except TpujobError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        typer.echo(f"error: {exc.message}", err=True)
        return exc.exit_code
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        return EXIT_UNEXPECTED
    except typer.TyperException as exc:  # typer's usage errors: bad option, missing argument
        help_of = getattr(exc, "ctx", None)  # click's UsageError carries the command's context
        if type(exc).__name__ == "NoArgsIsHelpError" and help_of is not None:  # bare `tpujob`: help
            typer.echo(help_of.get_help())
            return EXIT_USAGE
        typer.echo(f"error: {exc.format_message()}", err=True)
        return getattr(exc, "exit_code", None) or EXIT_USAGE
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug: say so in one line; --debug shows where
        if debug:
            raise
        known = expired_credentials(exc)  # a Google call no typed error wraps: the fix is known
        if known is not None:
            typer.echo(f"error: {known.message}", err=True)
            return known.exit_code
        # The first line only: a driver's error goes on with the statement and its parameters.
        first = (str(exc).strip().splitlines() or [""])[0]
        typer.echo(f"error: unexpected {exc.__class__.__name__}: {first} (run with --debug for the traceback)",
                   err=True)
        return EXIT_UNEXPECTED


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
