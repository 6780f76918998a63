"""Batches as a pure function of (seed, step): a resumed run sees exactly the batches an
uninterrupted one would, whatever the number of restarts. Each host reads only its own rows.

Token shards are nanoGPT-style `.bin` files (a flat array of uint16 or uint32 tokens, no header);
a `meta.json` written by `tpujob data pack` names the dtype. Files are memory-mapped, so a
read-only disk or a gcsfuse mount is read lazily, one window per row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import DataConfig

# Distinguishes the data stream from other uses of the seed (initialisation uses jax's PRNG).
_DATA_STREAM = 0x7470756A  # "tpuj"


class DataError(ValueError):
    pass


def _rng(seed: int, step: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=[seed & (2**64 - 1), _DATA_STREAM ^ step]))


class Batches:
    """`rows(step, start, stop)` -> int32 array (stop - start, seq_len + 1): inputs and targets."""

    def __init__(self, cfg: DataConfig, seed: int, global_batch: int, seq_len: int, vocab_size: int):
        self.seed, self.global_batch, self.seq_len, self.vocab = seed, global_batch, seq_len, vocab_size
        self.shards: list[np.ndarray] = []
        if cfg.kind == "shards":
            self.shards = _open_shards(Path(cfg.path or ""), cfg.dtype, seq_len + 1)
            starts = np.array([len(s) - seq_len for s in self.shards], dtype=np.int64)
            self._cum = np.concatenate([[0], np.cumsum(starts)])

    def rows(self, step: int, start: int, stop: int, seq_len: int | None = None) -> np.ndarray:
        """Rows [start, stop) of the global batch at `step`, each seq_len + 1 tokens long."""
        T = (seq_len or self.seq_len) + 1
        rng = _rng(self.seed, step)
        if not self.shards:
            # Arithmetic sequences with a random start and stride: learnable (the loss falls,
            # which a smoke test can check), unlike uniform noise.
            first = rng.integers(0, self.vocab, size=self.global_batch)[start:stop]
            stride = rng.integers(1, 8, size=self.global_batch)[start:stop]
            seq = first[:, None] + stride[:, None] * np.arange(T)[None, :]
            return (seq % self.vocab).astype(np.int32)
        # A window start drawn uniformly over every valid start in every shard.
        picks = rng.integers(0, self._cum[-1], size=self.global_batch)[start:stop]
        shard_idx = np.searchsorted(self._cum, picks, side="right") - 1
        out = np.empty((stop - start, T), dtype=np.int32)
        for i, (s, p) in enumerate(zip(shard_idx, picks)):
            offset = int(p - self._cum[s])
            out[i] = self.shards[s][offset:offset + T]
        if out.size and int(out.max()) >= self.vocab:
            raise DataError(f"token {int(out.max())} at step {step} is outside vocab_size {self.vocab}")
        return out


def _open_shards(path: Path, dtype: str, window: int) -> list[np.ndarray]:
    if not path.is_dir():
        raise DataError(f"data.path {path} is not a directory")
    meta = path / "meta.json"
    if meta.exists():
        dtype = json.loads(meta.read_text()).get("dtype", dtype)
    files = sorted(path.glob("*.bin"))
    if not files:
        raise DataError(f"no .bin shards in {path}")
    shards = [np.memmap(f, dtype=np.dtype(dtype), mode="r") for f in files]
    usable: list[np.ndarray] = [s for s in shards if len(s) >= window]
    if not usable:
        raise DataError(f"every shard in {path} is shorter than seq_len + 1 = {window} tokens")
    return usable
