"""`tpujob lint PATH...`: find XLA/TPU pitfalls in training code before a slice is paid for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

# An import name or a comma list of them (`diffusers`, `transformers.models,diffusers`).
_PACKAGE_WORD = re.compile(r"[A-Za-z_][\w.]*(,[A-Za-z_][\w.]*)*,?")


def register(app: typer.Typer) -> None:
    app.command("lint", cls=_LintCommand)(lint)


class _LintCommand(TyperCommand):
    """Reads `--deps diffusers transformers` (the issue's syntax) as two packages: click
    gives an option one value, so the words after it are spread into repeated options."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread_deps(args))


def spread_deps(args: list[str]) -> list[str]:
    """`--deps a b PATH` -> `--deps a --deps b PATH`. After the value of a --deps, each word
    up to the next option is a package too when it reads as an import name and is not an
    existing file or directory (nor a .py file), so paths after the packages keep working."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # everything after is a path
            out.extend(args[i:])
            break
        out.append(arg)
        i += 1
        if arg == "--deps" or arg.startswith("--deps="):
            if arg == "--deps" and i < len(args):
                out.append(args[i])  # the option's own value, as click would take it
                i += 1
            while i < len(args) and _is_package_word(args[i]):
                out.extend(["--deps", args[i]])
                i += 1
    return out


def _is_package_word(word: str) -> bool:
    return (_PACKAGE_WORD.fullmatch(word) is not None and not word.endswith(".py")
            and not Path(word).exists())


def lint(
    paths: Annotated[list[str], typer.Argument(
        metavar="PATH",
        help="Python files or directories (directories honour their top-level .gitignore).",
        show_default=False)],
    deps: Annotated[list[str], typer.Option(
        "--deps", metavar="PKG",
        help="Also scan installed packages' sources for SDPA: --deps diffusers transformers "
             "(words up to the next option that are not existing paths), repeat --deps, or "
             "comma-separate.")] = [],  # noqa: B006 (typer reads the default)
    accelerator: Annotated[str | None, typer.Option(
        "--accelerator", metavar="ACC",
        help="Target accelerator type or generation, e.g. v6e-8 or v6e (its MXU width, "
             "256, is checked).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
    min_severity: Annotated[str, typer.Option(
        "--min-severity", metavar="LEVEL",
        help="Report only findings of this severity or above: note (all), warning, error.")
    ] = "note",
) -> None:
    """Check PyTorch/XLA and JAX code (.py, .ipynb) for TPU pitfalls. Exit 1 when a finding
    is an error."""
    from tpujob.lint import at_least, errors, lint_paths, render_json, render_text

    packages = [p.strip() for item in deps for p in item.split(",") if p.strip()]
    # The level is checked before any file is read: a typo is a usage error, not an empty run.
    at_least([], min_severity)
    findings = at_least(lint_paths(paths, deps=packages, accelerator=accelerator), min_severity)
    typer.echo(render_json(findings) if json_output else render_text(findings))
    if errors(findings):
        raise typer.Exit(1)
