"""`tpujob data pack FILES... --out DIR`: text -> large byte-level token shards for the runtime."""

from __future__ import annotations

from pathlib import Path

import typer

from tpujob.errors import UsageError


def register(app: typer.Typer) -> None:
    data = typer.Typer(help="Prepare training data for the bundled runtime.", no_args_is_help=True)

    @data.command("pack")
    def pack(
        files: list[Path] = typer.Argument(..., help="Text files; each becomes one document."),
        out: Path = typer.Option(..., "--out", help="Directory for the .bin shards and meta.json."),
        shard_tokens: int = typer.Option(2**28, "--shard-tokens",
                                         help="Tokens per shard (uint16: 2 bytes each)."),
    ) -> None:
        """Pack text into large uint16 shards (byte-level tokenizer, EOT between documents)."""
        from tpujob.runtime.pack import PackError, pack_files

        try:
            result = pack_files(files, out, shard_tokens=shard_tokens)
        except PackError as e:
            raise UsageError(str(e)) from None
        typer.echo(f"packed {result.documents} documents, {result.tokens} tokens "
                   f"into {len(result.shards)} shard(s) in {result.out_dir}")

    app.add_typer(data, name="data")
