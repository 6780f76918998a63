"""Fixtures for the runtime tests. Subprocesses share the suite's persistent compilation cache
(shared_jax_cache, across xdist workers), so only the first run of each program pays XLA's
compile (seconds on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import BASE, Run, launch, load_checkpoint


@pytest.fixture(scope="session")
def compile_cache(shared_jax_cache) -> Path:
    return shared_jax_cache


@pytest.fixture(scope="session")
def jax_here(compile_cache):
    """JAX in this (xdist worker) process, compiling through the same cache: a test that
    compiles the model here costs 1.3 CPU-seconds with a hit, 12.6 without (2026-11-27). JAX
    opens the cache at its first lookup with a directory set, so setting it here, after other
    tests compiled without one, still takes effect."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(compile_cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    return jax


@pytest.fixture
def runtime(compile_cache):
    """launch() bound to the session's compile cache; kills what is left at teardown."""
    started: list[Run] = []

    def start(run_dir: Path, overrides: dict | None = None, devices: int = 2,
              host: tuple[int, int, str] | None = None, env_extra: dict | None = None) -> Run:
        run = launch(compile_cache, run_dir, overrides, devices, host, env_extra)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


@pytest.fixture(scope="session")
def reference(compile_cache, tmp_path_factory) -> dict[str, np.ndarray]:
    """The final state of an uninterrupted BASE run: what every resumed run must equal."""
    run = launch(compile_cache, tmp_path_factory.mktemp("reference") / "run")
    assert run.wait() == 0, run.stderr()
    return load_checkpoint(run.run_dir, BASE["steps"])
