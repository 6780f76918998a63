"""Helpers for the runtime tests: launch `python -m tpujob.runtime CONFIG` as the orchestrator
does (the contract's environment, a subprocess), and read back what it left in the run dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from tpujob.emulator.machines.slice import IMAGE_SITE

REPO = Path(__file__).resolve().parents[2]

# Small and fast, but every path of the real program: 2 devices (FSDP sharding), async saves.
BASE = {
    "model": "tiny",
    "batch_size": 4,
    "seq_len": 32,
    "steps": 12,
    "checkpoint_every": 4,
    "keep": 10,
    "log_every": 1,
    "heartbeat_every_s": 1,
    # decay_steps fixed, not `steps`: a test that runs longer (or shorter) runs the same
    # compiled program (JAX's cache key holds the schedule's constants), a cache hit.
    "optimizer": {"warmup_steps": 3, "decay_steps": 12},
}


@dataclass
class Run:
    run_dir: Path
    config: Path
    proc: subprocess.Popen

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"runtime did not exit in {timeout}s:\n{self.stderr()}") from None

    def stderr(self) -> str:
        return self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""


def launch(cache: Path, run_dir: Path, overrides: dict | None = None, devices: int = 2,
           host: tuple[int, int, str] | None = None, env_extra: dict | None = None) -> Run:
    """Start the runtime; `host` = (index, count, coordinator) for a multi-host slice."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"{run_dir.name}.yaml"
    config.write_text(yaml.safe_dump({**BASE, **(overrides or {})}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUJOB_") and k != "GCE_METADATA_HOST"}
    env.update({
        "TPUJOB_RUN_DIR": str(run_dir), "TPUJOB_JOB_ID": "test", "TPUJOB_ATTEMPT": "1",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        # The emulated hosts' Python: every host of a slice reads the compile cache host 0
        # wrote, as on a TPU VM (tpujob/emulator/machines/image_site/sitecustomize.py).
        "PYTHONPATH": IMAGE_SITE,
    })
    env.update(env_extra or {})
    if host is not None:
        index, count, coordinator = host
        env.update({"TPUJOB_HOST_INDEX": str(index), "TPUJOB_NUM_HOSTS": str(count),
                    "TPUJOB_COORDINATOR": coordinator})
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.runtime", str(config)], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return Run(run_dir, config, proc)


def status(run_dir: Path):
    """status.json through the contract's one reader; None before the program wrote one."""
    from tpujob.runtime.contract import parse_status

    path = run_dir / "status.json"
    return parse_status(path.read_text()) if path.exists() else None


def heartbeat(run_dir: Path) -> dict:
    return json.loads((run_dir / "heartbeat").read_text())


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The committed checkpoints (a step directory without its commit file is a killed save)."""
    ckpt = run_dir / "checkpoints"
    return sorted(int(p.name) for p in ckpt.iterdir()
                  if p.name.isdigit() and (p / "commit_success.txt").exists()) if ckpt.exists() else []


def load_checkpoint(run_dir: Path, step: int) -> dict[str, np.ndarray]:
    """The saved train state (params, Adam moments, step) as flat numpy arrays."""
    import jax
    import orbax.checkpoint as ocp

    path = (run_dir / "checkpoints" / str(step) / "default").absolute()
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # the saver had more devices
    with ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(path).item_metadata
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
        tree = ckptr.restore(path, target)
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def assert_bit_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert a[key].tobytes() == b[key].tobytes(), f"{key} differs"
