"""`tpujob cache list|clear`: the setup cache's archives in the jobs' run dir buckets."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    cache = typer.Typer(help="The setup cache (setup: {run, cache, key_files}): list or clear it.",
                        no_args_is_help=True)

    @cache.command("list")
    def list_(bucket: str | None = typer.Option(None, "--bucket", help="Look in this bucket only "
                                                   "(default: the run dir buckets of this store's jobs)."),
              as_json: bool = typer.Option(False, "--json")) -> None:
        """The setup archives, newest first: bucket, key, size, age."""
        from tpujob.attempt import setup_cache
        from tpujob.cli import render
        from tpujob.service.context import Context

        found = setup_cache.entries(Context.load(), bucket)
        if as_json:
            render.print_json([_row(e) for e in found])
        elif not found:
            typer.echo("the setup cache is empty")
        else:
            typer.echo(render.table(["KEY", "SIZE", "AGE", "WHERE"],
                                    [[e.key, _size(e.size_bytes), render.age(e.updated), e.url] for e in found]))

    @cache.command("clear")
    def clear(key: str = typer.Argument("", help="Only the keys starting with this (default: all)."),
              bucket: str | None = typer.Option(None, "--bucket", help="This bucket only."),
              as_json: bool = typer.Option(False, "--json")) -> None:
        """Delete setup archives: the next setup of each key runs again, and stores it anew."""
        from tpujob.attempt import setup_cache
        from tpujob.cli import render
        from tpujob.service.context import Context

        gone = setup_cache.clear(Context.load(), key, bucket)
        if as_json:
            render.print_json([_row(e) for e in gone])
            return
        for entry in gone:
            typer.echo(f"deleted {entry.url}")
        typer.echo(f"{len(gone)} setup archive{'s' if len(gone) != 1 else ''} deleted")

    app.add_typer(cache, name="cache")


def _row(entry) -> dict:
    from tpujob.cli import render

    return {"bucket": entry.bucket, "key": entry.key, "url": entry.url, "size_bytes": entry.size_bytes,
            "updated": render.iso(entry.updated)}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
