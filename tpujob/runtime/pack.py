"""Pack text files into large token shards with a byte-level tokenizer (no downloads).

Token = byte value (0-255), and EOT = 256 after every document: vocab 257, stored as uint16,
nanoGPT style (flat array, no header). Shards are large on purpose: many small files on network
storage (gcsfuse, a cloned disk) cost one round trip each, and the reader memory-maps the shards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

EOT = 256
VOCAB_SIZE = 257
DEFAULT_SHARD_TOKENS = 2**28  # 512 MiB of uint16 per shard
_CHUNK_BYTES = 16 * 2**20


class PackError(ValueError):
    pass


@dataclass(frozen=True)
class PackResult:
    out_dir: Path
    shards: list[str]
    tokens: int
    documents: int


def pack_files(
    files: Sequence[str | Path], out_dir: str | Path, shard_tokens: int = DEFAULT_SHARD_TOKENS
) -> PackResult:
    """Write `shard_00000.bin`, ... and `meta.json` into `out_dir`; each file is one document."""
    paths = [Path(f) for f in files]
    if not paths:
        raise PackError("no input files")
    for p in paths:
        if not p.is_file():
            raise PackError(f"input {p} is not a file")
    if shard_tokens < 1:
        raise PackError(f"shard size must be positive, got {shard_tokens}")
    out = Path(out_dir)
    if out.exists() and any(out.glob("*.bin")):
        raise PackError(f"{out} already holds .bin shards; pack into an empty directory")
    out.mkdir(parents=True, exist_ok=True)

    writer = _ShardWriter(out, shard_tokens)
    for p in paths:
        with p.open("rb") as f:
            while chunk := f.read(_CHUNK_BYTES):
                writer.write(np.frombuffer(chunk, dtype=np.uint8).astype(np.uint16))
        writer.write(np.array([EOT], dtype=np.uint16))
    writer.close()
    meta = {
        "tokenizer": "bytes", "dtype": "uint16", "vocab_size": VOCAB_SIZE, "eot": EOT,
        "tokens": writer.total, "documents": len(paths), "shards": writer.names,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return PackResult(out, writer.names, writer.total, len(paths))


def decode(tokens: np.ndarray) -> list[bytes]:
    """Tokens -> documents (the inverse of packing, for checks and samples)."""
    docs, current = [], bytearray()
    for t in tokens.tolist():
        if t == EOT:
            docs.append(bytes(current))
            current = bytearray()
        else:
            current.append(t)
    if current:
        docs.append(bytes(current))
    return docs


class _ShardWriter:
    def __init__(self, out: Path, shard_tokens: int):
        self.out, self.shard_tokens = out, shard_tokens
        self.names: list[str] = []
        self.total = 0
        self._file: BinaryIO | None = None
        self._in_shard = 0

    def write(self, tokens: np.ndarray) -> None:
        while len(tokens):
            file = self._next() if self._file is None or self._in_shard == self.shard_tokens else self._file
            take = min(len(tokens), self.shard_tokens - self._in_shard)
            file.write(tokens[:take].tobytes())
            self._in_shard += take
            self.total += take
            tokens = tokens[take:]

    def _next(self) -> BinaryIO:
        self.close()
        name = f"shard_{len(self.names):05d}.bin"
        self.names.append(name)
        self._file = file = (self.out / name).open("wb")
        self._in_shard = 0
        return file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
