"""The contract between the orchestrator and a host program: environment in, files and exit code out.

Pure (no jax): the orchestrator imports this module to read what the runtime left behind. A user's
own training command may follow the same contract; docs/runtime.md documents it for them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

# Exit codes. 75-79 sit between the shell's own codes (126, 127, 128+signal) and the small codes
# that Python and typical scripts use (1, 2); 75 is sysexits' EX_TEMPFAIL ("try again later").
EXIT_SUCCESS = 0
EXIT_ERROR = 1  # unexpected error: a bug, a crash, an unreadable data directory
EXIT_PREEMPTED = 75  # SIGTERM received; a checkpoint of the current step was written: requeue
EXIT_NAN = 76  # non-finite loss or grad norm; nothing written from the bad state: new hardware
EXIT_INIT_CHECK = 77  # parameters do not match what the initializer promises; refused before step 1
EXIT_CONFIG = 78  # invalid runtime config (sysexits' EX_CONFIG); retrying cannot help
EXIT_RECOMPILE = 79  # the train step recompiled after step 1 and strict_shapes is on

EXIT_CODES: dict[int, str] = {
    EXIT_SUCCESS: "succeeded: all steps done, final checkpoint written",
    EXIT_ERROR: "failed: unexpected error (see status.json message and the host log)",
    EXIT_PREEMPTED: "preempted: SIGTERM, checkpoint written at the next step boundary; resume",
    EXIT_NAN: "nan: non-finite loss or grad norm; resume from the last good checkpoint elsewhere",
    EXIT_INIT_CHECK: "failed: initialisation check refused the parameters before step 1",
    EXIT_CONFIG: "failed: invalid runtime config",
    EXIT_RECOMPILE: "failed: train step recompiled and strict_shapes is on",
}

# States written to status.json, one per way the program ends.
STATE_SUCCEEDED = "succeeded"
STATE_FAILED = "failed"
STATE_PREEMPTED = "preempted"
STATE_NAN = "nan"
STATES = (STATE_SUCCEEDED, STATE_FAILED, STATE_PREEMPTED, STATE_NAN)

# What one exec(2) on a host takes: each argument and each NAME=VALUE of the environment is at
# most MAX_ARG_STRLEN bytes, its NUL included (PAGE_SIZE * 32 with Linux's 4 KiB pages:
# torvalds/linux include/uapi/linux/binfmts.h). The job's commands run as `bash -c COMMAND` and
# its env is exported on the hosts, so these are bounded at validate (spec.resolution) and
# before a setup starts (hosts.scripts.env_payload), never found on a paid slice.
MAX_ARG_BYTES = 32 * 4096 - 1
# All arguments and the environment together must fit in a quarter of the stack limit (fs/exec.c:
# RLIMIT_STACK / 4, 2 MiB under the usual 8 MiB); the job's env gets half of that, leaving the
# rest to the command and to what the host's login puts in the environment itself.
MAX_ENV_BYTES = 1 << 20
# A path on a host: at most PATH_MAX bytes, its NUL included (torvalds/linux
# include/uapi/linux/limits.h), or every call naming it fails with ENAMETOOLONG.
MAX_PATH_BYTES = 4096 - 1

# Environment the orchestrator sets on every host.
ENV_JOB_ID = "TPUJOB_JOB_ID"
ENV_ATTEMPT = "TPUJOB_ATTEMPT"
ENV_HOST_INDEX = "TPUJOB_HOST_INDEX"
ENV_NUM_HOSTS = "TPUJOB_NUM_HOSTS"
ENV_COORDINATOR = "TPUJOB_COORDINATOR"  # host 0 "ip:port"
ENV_RUN_DIR = "TPUJOB_RUN_DIR"  # shared directory (a gcsfuse mount in production)
# Multislice: the slices over DCN (libtpu's variable; tpujob sets it, with the other MEGASCALE_*
# ones, on every host of a job of several slices). Hosts are slice-major: host i is in slice
# i // (TPUJOB_NUM_HOSTS / MEGASCALE_NUM_SLICES).
ENV_NUM_SLICES = "MEGASCALE_NUM_SLICES"
# Elastic multislice: the slices the job runs on when it has them all. On fewer, the bundled
# runtime splits each step into max/current times its microbatches, so each device's share of a
# step (and its memory) stays what it is on all of them, and the global batch with it.
ENV_MAX_SLICES = "TPUJOB_MAX_SLICES"
# `checkpoint_every: auto`: the mean seconds between interruptions tpujob measured for the
# attempt's zone, accelerator and provisioning (reconcile/risk.py), for Young's interval
# (runtime/spacing.py). Unset: the runtime's default (a day).
ENV_MTBI_SECONDS = "TPUJOB_MTBI_SECONDS"

# Files under the run dir (written by host 0 only, except checkpoints which all hosts write).
HEARTBEAT_FILE = "heartbeat"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_DIR = "checkpoints"

# The signal on which a program prints every thread's stack to stderr (faulthandler.register),
# sent by the orchestrator to each host before it ends a hung program (docs/runtime.md).
STACKS_SIGNAL = signal.SIGUSR1

# The heartbeat is one JSON object: job_id, attempt, host, total, time, step, phase,
# resumed_from, startup, progress_time, and the ledger's LEDGER_KEYS (runtime/metrics.Heartbeat
# writes it; templates/status.sh reads attempt, step, total, resumed_from, progress_time and
# LEDGER_KEYS, and the sweep reads them there).
# The heartbeat is rewritten at least this often while the program lives.
HEARTBEAT_MAX_INTERVAL_S = 30
# What only the program knows of where its time went (whole milliseconds, this attempt's):
# compile, restore, the stalls of checkpoint saves, its mean step, its newest save's stall (C),
# and under `checkpoint_every: auto` the interval it chose and the M it was given.
LEDGER_KEYS = ("compile_ms", "restore_ms", "checkpoint_ms", "step_ms", "save_ms", "interval_ms", "mtbi_ms")


@dataclass(frozen=True)
class Status:
    """What status.json says about how the program ended."""

    state: str
    step: int
    message: str
    compiles: int = 0
    exit_code: int | None = None
    resumed_from: int | None = None
    time: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reported:
    """What the program reported of one attempt for the ledger (the heartbeat's LEDGER_KEYS, as
    the store keeps them in attempt.reported), in seconds; `mtbi` is what tpujob handed it.
    `step` is its mean training step; `save` its newest save's stall (C); `interval` the
    checkpoint interval it chose under `checkpoint_every: auto`."""
    compile: float = 0.0
    restore: float = 0.0
    checkpoint: float = 0.0
    step: float | None = None
    save: float | None = None
    interval: float | None = None
    mtbi: float | None = None

    @property
    def measured(self) -> bool:
        """Whether the program said anything (not only the M tpujob handed it)."""
        return any(v is not None for v in (self.step, self.save, self.interval)) or \
            bool(self.compile or self.restore or self.checkpoint)

    @classmethod
    def parse(cls, raw: str | None) -> Reported | None:
        """attempt.reported (JSON of whole milliseconds), or None where nothing (readable) is."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None

        def ms(key: str) -> float | None:
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                return value / 1000
            return None

        return cls(compile=ms("compile_ms") or 0.0, restore=ms("restore_ms") or 0.0,
                   checkpoint=ms("checkpoint_ms") or 0.0, step=ms("step_ms"), save=ms("save_ms"),
                   interval=ms("interval_ms"), mtbi=ms("mtbi_ms"))


@dataclass(frozen=True)
class RunDirStatus:
    """What the orchestrator knows of the current attempt from its run dir, without SSH:
    status.json's verdict (`state` None while this attempt has written none) and how long ago
    the heartbeat was rewritten. The sweep decides on it; `show` and the dashboard print it."""

    state: str | None = None
    step: int | None = None
    message: str = ""
    exit_code: int | None = None
    heartbeat_age: float | None = None  # seconds; None: no heartbeat from this attempt yet
    problem: str = ""  # status.json exists but is not a status: why (parse_status's words)
    url: str = ""  # where it was read: gs://BUCKET/PREFIX

    @classmethod
    def of(cls, status: Status | None, heartbeat_age: float | None, *, problem: str = "",
           url: str = "") -> RunDirStatus:
        if status is None:
            return cls(heartbeat_age=heartbeat_age, problem=problem, url=url)
        return cls(state=status.state, step=status.step, message=status.message, exit_code=status.exit_code,
                   heartbeat_age=heartbeat_age, problem=problem, url=url)


def status_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / STATUS_FILE


def parse_status(raw: str | bytes) -> Status:
    """The one reader of status.json: the runtime's tests, the sweep, `show` and the dashboard
    all read it here. ValueError says why a file is not a status."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"status.json is not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("state") not in STATES:
        raise ValueError(f"status.json has no valid state (one of {', '.join(STATES)})")
    known = {"state", "step", "message", "compiles", "exit_code", "resumed_from", "time"}
    return Status(
        state=data["state"],
        step=_int(data.get("step"), 0),
        message=str(data.get("message", "")),
        compiles=_int(data.get("compiles"), 0),
        exit_code=_int(data.get("exit_code"), None),
        resumed_from=_int(data.get("resumed_from"), None),
        time=data.get("time") if isinstance(data.get("time"), (int, float)) else None,
        extra={k: v for k, v in data.items() if k not in known},
    )


@overload
def _int(value: Any, default: int) -> int: ...
@overload
def _int(value: Any, default: None) -> int | None: ...
def _int(value: Any, default: int | None) -> int | None:
    """An integer field as written, else `default`: a program's odd value is not fatal."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write then rename, so a reader never sees half a file (gcsfuse uploads on close)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_status(run_dir: str | os.PathLike, status: Status) -> None:
    data: dict[str, Any] = {
        **status.extra,
        "state": status.state,
        "step": status.step,
        "message": status.message,
        "compiles": status.compiles,
        "exit_code": status.exit_code,
        "resumed_from": status.resumed_from,
        "time": status.time if status.time is not None else time.time(),
    }
    write_json_atomic(status_path(run_dir), data)
