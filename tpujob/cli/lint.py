"""`tpujob lint PATH...`: find XLA/TPU pitfalls in training code before a slice is paid for."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("lint")(lint)


def lint(
    paths: Annotated[list[str], typer.Argument(
        help="Python files or directories (directories honour their top-level .gitignore).",
        show_default=False)],
    deps: Annotated[list[str], typer.Option(
        "--deps", metavar="PKG",
        help="Also scan an installed package's sources for SDPA (repeat, or comma-separate: "
             "--deps diffusers,transformers).")] = [],  # noqa: B006 (typer reads the default)
    accelerator: Annotated[str | None, typer.Option(
        "--accelerator", metavar="ACC",
        help="Target accelerator type or generation, e.g. v6e-8 or v6e (its MXU width, "
             "256, is checked).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
) -> None:
    """Check PyTorch/XLA and JAX code for TPU pitfalls. Exit 1 when a finding is an error."""
    from tpujob.lint import errors, lint_paths, render_json, render_text

    packages = [p.strip() for item in deps for p in item.split(",") if p.strip()]
    findings = lint_paths(paths, deps=packages, accelerator=accelerator)
    typer.echo(render_json(findings) if json_output else render_text(findings))
    if errors(findings):
        raise typer.Exit(1)
