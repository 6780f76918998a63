"""Shipping the bundled runtime to the hosts: the runtime package and the job's config,
synced like user code, then `python3 -m tpujob.runtime runtime.yaml` from that directory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

import tpujob.runtime
from tpujob.hosts.scripts import render
from tpujob.names import local_job_dir, runtime_bundle_dir

CONFIG_NAME = "runtime.yaml"
# What a TPU VM needs to run it; the image has none of it. setup.sh installs them unless all of
# MODULES already import.
REQUIREMENTS = ("jax[tpu]", "optax", "orbax-checkpoint", "pyyaml")
MODULES = ("jax", "optax", "orbax.checkpoint", "yaml")


def build(home: Path, job_id: int, runtime_config: dict[str, Any]) -> Path:
    """A directory holding `tpujob/runtime/` (and an empty `tpujob/__init__.py`) and the config."""
    root = home / local_job_dir(job_id) / "runtime-bundle"
    package = root / "tpujob"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(Path(tpujob.runtime.__file__).parent, package / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # The runtime imports nothing else from tpujob: an empty package marker is all it needs.
    (package / "__init__.py").write_text('"""tpujob, as shipped to a host: the runtime only."""\n')
    (root / CONFIG_NAME).write_text(yaml.safe_dump(runtime_config, sort_keys=True))
    return root


def run_command(job_id: int) -> str:
    """The program launch.sh runs: templates/runtime.sh, rendered (every value quoted)."""
    return render("runtime.sh", bundle_dir=runtime_bundle_dir(job_id), config=CONFIG_NAME)
