"""`tpujob demo`: the example job on the local emulator, from nothing to SUCCEEDED."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpujob.errors import ConfigError, NotFoundError
from tpujob.service.context import Context

if TYPE_CHECKING:
    from tpujob.store.models import Job


def example_spec() -> Path:
    """The example job spec, package data of tpujob (the repository's jobs.example.yaml links to
    it), so that `pip install` then `tpujob demo` works outside the repository."""
    import importlib.resources

    return Path(str(importlib.resources.files("tpujob") / "examples" / "demo.yaml"))


@dataclass(frozen=True)
class Demo:
    job: Job
    spec: Path
    tpu_endpoint: str
    started_emulator: bool


def start(ctx: Context, spec: str | None = None) -> Demo:
    """Start the emulator if it is not running and record the example job (PENDING).

    Refused when the configured cloud is not `local`: a demo must never spend real quota."""
    from tpujob.emulator import process
    from tpujob.service import jobs

    if ctx.settings.cloud != "local":
        raise ConfigError(f"tpujob demo runs on the local emulator, but the configured cloud is "
                          f"{ctx.settings.cloud!r}: run it with TPUJOB_CLOUD=local")
    path = Path(spec) if spec else example_spec()
    if not path.is_file():
        raise NotFoundError(f"no job spec at {path}")
    running = process.status()
    if running:  # process.start() runs the same preflight itself
        from tpujob import preflight

        preflight.require_emulator()  # the running emulator's hosts need it: before recording
    info = running or process.start()
    run_dir_bucket = _run_dir_bucket(path)
    if run_dir_bucket:
        from tpujob.attempt.buckets import create_local_bucket
        from tpujob.clients import make_storage

        create_local_bucket(make_storage(ctx.settings), run_dir_bucket)
    job = jobs.create(ctx, str(path)).job
    return Demo(job, path, info["tpu_endpoint"], started_emulator=running is None)


def _run_dir_bucket(path: Path) -> str | None:
    """The bucket of the spec's `run_dir: gs://BUCKET/...`, if it names one (create validates)."""
    import yaml

    from tpujob.names import split_gs

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # create reports it
    run_dir = data.get("run_dir") if isinstance(data, dict) else None
    located = split_gs(run_dir) if isinstance(run_dir, str) else None
    return located[0] if located else None

