"""Tokens/s of the runtime's train loop against a bare JAX loop of the same model and batch.

Both run in this process on the same devices. The bare loop is the floor of overhead: the same
jitted, donated train step, no data pipeline, no metrics, no checkpoints, two steps in flight.
The runtime loop is the real one (data per step, lagged metrics, heartbeat, async checkpoints
every `checkpoint_every` steps, the default unless given).

    .venv/bin/python scripts/bench_runtime.py --preset tiny --steps 200
    XLA_FLAGS=--xla_force_host_platform_device_count=2 .venv/bin/python scripts/bench_runtime.py
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from tpujob.runtime import model, peaks, train
from tpujob.runtime.config import RuntimeConfig, config_from_dict
from tpujob.runtime.data import Batches
from tpujob.runtime.distributed import HostEnv
from tpujob.runtime.loop import Trainer
from tpujob.runtime.preemption import Preemption


def bare_loop(cfg: RuntimeConfig, steps: int) -> float:
    mesh = train.make_mesh()
    step_fn = train.StepCompiler(cfg, mesh)  # the very executable the runtime runs
    state = train.init_state(cfg, mesh)
    batches = Batches(cfg.data, cfg.seed, cfg.batch_size, cfg.seq_len, cfg.model.vocab_size)
    tokens = [jax.device_put(batches.rows(s, 0, cfg.batch_size), train.batch_sharding(mesh))
              for s in range(min(steps, 8))]  # prepared up front: no input pipeline at all
    flags = jax.device_put(np.zeros((mesh.devices.size, 2), np.int32), train.batch_sharding(mesh))
    state, m = step_fn(state, tokens[0], flags)  # compile and warm up
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    in_flight: list = []
    for s in range(steps):
        state, m = step_fn(state, tokens[s % len(tokens)], flags)
        in_flight.append(m)
        # At most two steps queued, as any real loop has: with hundreds queued, XLA:CPU's
        # cross-device all-reduce stalls on its rendezvous and aborts (seen on 2 busy cores).
        if len(in_flight) > 2:
            jax.block_until_ready(in_flight.pop(0))
    jax.block_until_ready(m)
    return steps * cfg.batch_size * cfg.seq_len / (time.perf_counter() - t0)


def runtime_loop(cfg: RuntimeConfig, run_dir: Path) -> tuple[float, float, Trainer]:
    host = HostEnv("bench", 0, 0, 1, None, run_dir, hosts_given=True)
    trainer = Trainer(cfg, host)
    preemption = Preemption(cfg.sigterm_grace_s)
    try:
        outcome = trainer.run(preemption)
    finally:
        preemption.restore()
    assert outcome.exit_code == 0, outcome.message
    # The first step carries the compile (timed separately); the rest is the loop as it runs.
    seconds = trainer.loop_seconds - trainer.compiler.compile_seconds
    return cfg.steps * cfg.batch_size * cfg.seq_len / seconds, seconds, trainer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=RuntimeConfig.checkpoint_every)
    p.add_argument("--accelerator", default="auto")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = config_from_dict({
        "model": args.preset, "batch_size": args.batch_size, "seq_len": args.seq_len,
        "steps": args.steps, "checkpoint_every": args.checkpoint_every,
        "accelerator": args.accelerator, "init_check": True,
    })
    devices = jax.devices()
    print(f"devices: {len(devices)} x {devices[0].device_kind}; preset {args.preset} "
          f"({model.param_count(cfg.model, cfg.seq_len) / 1e6:.1f}M params), global batch "
          f"{cfg.batch_size} x {cfg.seq_len}, {cfg.steps} steps, checkpoint every "
          f"{cfg.checkpoint_every}")
    bare = bare_loop(dataclasses.replace(cfg), cfg.steps)
    with tempfile.TemporaryDirectory() as tmp:
        ours, seconds, trainer = runtime_loop(cfg, Path(tmp))
    ckpt_share = trainer.ckpt.seconds / seconds
    print(f"bare JAX loop:   {bare:12.0f} tokens/s")
    print(f"runtime loop:    {ours:12.0f} tokens/s")
    print(f"ratio runtime/bare: {ours / bare:.3f}")
    print(f"checkpointing: {trainer.ckpt.seconds:.2f} s blocking of {seconds:.2f} s "
          f"({ckpt_share:.1%}) at checkpoint_every={cfg.checkpoint_every}")
    flops = model.flops_per_token(cfg.model, cfg.seq_len)
    mfu_bare = peaks.mfu(flops, bare, trainer.generation, len(devices))
    mfu_ours = peaks.mfu(flops, ours, trainer.generation, len(devices))
    if mfu_ours is not None:
        print(f"MFU: runtime loop {mfu_ours:.1%}, bare loop {mfu_bare:.1%} of "
              f"{trainer.peak / 1e12:.0f} TFLOP/s per chip x "
              f"{peaks.chips(trainer.generation, len(devices)):g} chips ({trainer.generation})")
    else:
        print("MFU: n/a (no known peak for this device)")


if __name__ == "__main__":
    main()
