"""The job's program on the hosts of a slice: setup, launch (detached), stop, status.

Host-side layout, under `job_dir` (relative paths are taken from the user's home):
`attempt-N/` holds `program.pid` (the wrapper, leader of the program's process group and
session), `program.log`, `exit_code` once the program ended, and `setup.done`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Callable

from tpujob.hosts.fanout import Host, HostGroup, HostResult, Progress
from tpujob.hosts.scripts import as_command, env_payload, render
from tpujob.names import host_job_dir
from tpujob.runtime import contract

MEGASCALE_PORT = 8081  # Levanter's (ray_tpu.py); no Google page names a port for slices made apart


@dataclass(frozen=True)
class HostAttempt:
    """What the host scripts need to know about one attempt of a job."""
    job_id: str
    attempt: int
    coordinator: str           # host 0's address:port (contract.ENV_COORDINATOR)
    run_dir: str               # the shared run directory (contract.ENV_RUN_DIR)
    workdir: str               # where the program runs on each host (the synced code)
    job_dir: str = ""          # host-side state; default names.host_job_dir under the home
    env: dict[str, str] = field(default_factory=dict)       # the spec's env
    secrets: dict[str, str] = field(default_factory=dict)   # forwarded, never logged or stored
    slices: int = 1            # multislice: the hosts are slice-major, as many per slice
    max_slices: int = 1        # elastic multislice: the slices it runs on when it has them all

    @property
    def host_dir(self) -> str:
        return self.job_dir or host_job_dir(self.job_id)

    def environment(self, host: Host, num_hosts: int) -> dict[str, str]:
        """The runtime contract, then the spec's env, then secrets (later ones win)."""
        return {contract.ENV_JOB_ID: self.job_id, contract.ENV_ATTEMPT: str(self.attempt),
                contract.ENV_HOST_INDEX: str(host.index), contract.ENV_NUM_HOSTS: str(num_hosts),
                contract.ENV_COORDINATOR: self.coordinator, contract.ENV_RUN_DIR: self.run_dir,
                **self._megascale(host, num_hosts),
                **({contract.ENV_MAX_SLICES: str(self.max_slices)} if self.max_slices > self.slices else {}),
                **self.env, **self.secrets}

    def _megascale(self, host: Host, num_hosts: int) -> dict[str, str]:
        """Multislice: what libtpu and JAX read to join the slices over DCN, as a launcher sets
        them for slices made apart (stanford-crfm/levanter ray_tpu.py: the coordinator is slice
        0's worker 0 on MEGASCALE_PORT)."""
        if self.slices == 1:
            return {}
        per_slice = num_hosts // self.slices
        return {"MEGASCALE_COORDINATOR_ADDRESS": f"{self.coordinator.rsplit(':', 1)[0]}:{MEGASCALE_PORT}",
                contract.ENV_NUM_SLICES: str(self.slices), "MEGASCALE_SLICE_ID": str(host.index // per_slice),
                "MEGASCALE_PORT": str(MEGASCALE_PORT)}


@dataclass(frozen=True)
class HostStatus:
    index: int
    state: str                  # absent | running | exited | lost | unreachable | refused
    exit_code: int | None = None
    pid: int | None = None
    log_bytes: int = 0
    error: str = ""
    step: int | None = None          # the runtime contract's heartbeat step, where there is one
    total: int | None = None         # ... and the step it runs to, where the heartbeat says
    resumed_from: int | None = None  # the checkpoint step the program restored
    ended_at: float | None = None    # a program that exited non-zero or was lost: when (host clock)
    log_tail: str = ""               # ... and the end of its log (unbounded, unmasked: see failure.py)
    log_age: int | None = None       # seconds since program.log last grew (the host's clock)
    progress_age: int | None = None  # seconds since the heartbeat's step or phase last moved
    reported: dict[str, int] | None = None  # the heartbeat's contract.LEDGER_KEYS (milliseconds)


LogPaths = Callable[[Host], pathlib.Path] | None
TAIL_BYTES = 16 * 1024  # of a dead program's log: its last lines, and a bad-host line among them
TIMED_OUT = 124   # setup.sh's exit code when the job's setup ran past its timeout
SETUP_GRACE = 30  # seconds tpujob waits past the setup timeout for the host's own answer
# Between a stop's SIGTERM and its SIGKILL: the program's SIGTERM checkpoint (the runtime's
# sigterm_grace_s, 25 s, fits in it).
STOP_GRACE_SECONDS = 30


def setup(group: HostGroup, attempt: HostAttempt, command: str, *, runtime_modules: tuple[str, ...] = (),
          runtime_packages: tuple[str, ...] = (), log_paths: LogPaths = None,
          timeout: float | None = None, progress: Callable[[Progress], None] | None = None
          ) -> list[HostResult]:
    """Prepare every host once per attempt (fail-fast): the run dir, the bundled runtime's
    packages when given (a failure of these is a failure of the setup), then `command`.

    `timeout` bounds each host: the host kills `command` after it (exit code TIMED_OUT), and
    tpujob gives up on a host that has not answered shortly after."""
    script = setup_script(attempt, command, runtime_modules=runtime_modules, runtime_packages=runtime_packages,
                          timeout=timeout)
    return group.run(as_command(script, "tpujob-setup"), stdin=_env(group, attempt),
                     log_paths=log_paths, timeout=timeout + SETUP_GRACE if timeout else None,
                     fail_fast=True, progress=progress)


def setup_script(attempt: HostAttempt, command: str, *, runtime_modules: tuple[str, ...] = (),
                 runtime_packages: tuple[str, ...] = (), timeout: float | None = None,
                 cache_paths: tuple[str, ...] = (), cache_archive: str = "", cache_digest: str = "") -> str:
    """setup.sh for this attempt: the run dir, the bundled runtime's packages, then `command`,
    or instead the archive of `cache_paths` at `cache_archive` (a path without its extension, on
    the hosts) where there is one whose sha256 is `cache_digest`; host 0 stores it after a
    successful setup where there is none, or in place of one refused."""
    return render("setup.sh", job_dir=attempt.host_dir, attempt=attempt.attempt,
                  workdir=attempt.workdir, run_dir=attempt.run_dir,
                  runtime_modules=" ".join(runtime_modules),
                  runtime_packages=" ".join(runtime_packages), command=command,
                  timeout_seconds=math.ceil(timeout) if timeout else 0,
                  cache_paths="\n".join(cache_paths), cache_archive=cache_archive if cache_paths else "",
                  cache_digest=cache_digest if cache_paths else "")


@dataclass(frozen=True)
class SetupStatus:
    index: int
    state: str                  # absent | running | done | failed | lost | unreachable | refused
    exit_code: int | None = None
    said: str = ""              # a failed or lost setup's last words (its stderr, else its output)
    cache: str = ""             # setup.sh's note on the setup cache: "hit 1.2", "miss absent stored 3.4"
    error: str = ""             # unreachable or refused: why


SETUP_WAIT = 2.0  # seconds a start waits for a setup that is over in a moment (none, a cache hit)


def start_setup(group: HostGroup, attempt: HostAttempt, script: str, *, log_paths: LogPaths = None,
                timeout: float | None = 60, wait_seconds: float = SETUP_WAIT,
                progress: Callable[[Progress], None] | None = None) -> list[SetupStatus]:
    """Start `script` (setup_script's) detached on every host and return once it ended or after
    `wait_seconds`: the setup's state on each host then (running, done, or ended: failed)."""
    text = render("setup_start.sh", job_dir=attempt.host_dir, attempt=attempt.attempt, script=script,
                  wait_tenths=max(0, math.ceil(wait_seconds * 10)))
    results = group.run(as_command(text, "tpujob-setup-start"), stdin=_env(group, attempt),
                        log_paths=log_paths, timeout=timeout, progress=progress)
    return [_setup_status(r) for r in results]


def setup_state(group: HostGroup, attempt: HostAttempt, *, timeout: float = 30) -> list[SetupStatus]:
    """Each host's view of the attempt's setup (setup_state.sh); unreachable hosts say so."""
    script = render("setup_state.sh", job_dir=attempt.host_dir, attempt=attempt.attempt)
    return [_setup_status(r) for r in group.run(as_command(script, "tpujob-setup-state"), timeout=timeout)]


def _setup_status(result: HostResult) -> SetupStatus:
    if result.auth_refused:
        return SetupStatus(result.index, "refused", error=result.describe())
    if result.exit_code is None:
        return SetupStatus(result.index, "unreachable", error=result.describe())
    if not result.ok:  # the script itself failed (a full disk, say): a failed setup, in its words
        return SetupStatus(result.index, "failed", result.exit_code, said=result.stderr or result.output)
    # The JSON line (whatever a tool said on stderr before it aside), then the setup's last words.
    _, brace, tail = result.output.partition("{")
    first, _, rest = (brace + tail).partition("\n")
    try:
        data = json.loads(first)
    except ValueError:
        return SetupStatus(result.index, "unreachable", error=f"unreadable setup state: {first[-200:]!r}")
    state = {"ended": "failed"}.get(data["setup"], data["setup"])
    return SetupStatus(result.index, state, data.get("exit_code"), said=rest, cache=data.get("cache", ""))


def launch(group: HostGroup, attempt: HostAttempt, command: str, *, log_paths: LogPaths = None,
           timeout: float | None = 120, progress: Callable[[Progress], None] | None = None) -> list[HostResult]:
    """Start `command` detached on every host; returns once every host has started it. What an
    earlier attempt left running is `clean`'s to end, before."""
    script = render("launch.sh", job_dir=attempt.host_dir, attempt=attempt.attempt,
                    workdir=attempt.workdir, command=command)
    return group.run(as_command(script, "tpujob-launch"), stdin=_env(group, attempt),
                     log_paths=log_paths, timeout=timeout, progress=progress)


def stop(group: HostGroup, attempt: HostAttempt, *, grace_seconds: float = STOP_GRACE_SECONDS,
         log_paths: LogPaths = None) -> list[HostResult]:
    """SIGTERM the program on every host, SIGKILL what is left after the grace period
    (templates/stop_group.sh: how clean stops an earlier attempt's program too)."""
    script = render("stop_group.sh") + render("stop.sh", job_dir=attempt.host_dir, attempt=attempt.attempt,
                                              grace_tenths=max(0, math.ceil(grace_seconds * 10)))
    return group.run(as_command(script, "tpujob-stop"), log_paths=log_paths,
                     timeout=grace_seconds + 30)


def stacks(group: HostGroup, attempt: HostAttempt, *, wait_seconds: float = 3,
           max_bytes: int = 256 * 1024) -> list[HostResult]:
    """Ask the program's processes on every host for their Python stacks (SIGUSR1, which the
    runtime's faulthandler answers) and return, per host, what its log gained meanwhile."""
    script = render("stacks.sh", job_dir=attempt.host_dir, attempt=attempt.attempt,
                    wait_tenths=max(1, math.ceil(wait_seconds * 10)), max_bytes=max_bytes)
    return group.run(as_command(script, "tpujob-stacks"), timeout=wait_seconds + 30)


def status(group: HostGroup, attempt: HostAttempt, *, timeout: float = 30) -> list[HostStatus]:
    """Each host's view of the program; unreachable hosts say so instead of raising."""
    script = render("status.sh", job_dir=attempt.host_dir, attempt=attempt.attempt, run_dir=attempt.run_dir,
                    tail_bytes=TAIL_BYTES, ledger_keys=" ".join(contract.LEDGER_KEYS))
    out = []
    for result in group.run(as_command(script, "tpujob-status"), timeout=timeout):
        if result.auth_refused:  # answered, but refused tpujob's key: not unreachable
            out.append(HostStatus(result.index, "refused", error=result.describe()))
            continue
        if not result.ok:
            out.append(HostStatus(result.index, "unreachable", error=result.describe()))
            continue
        # The JSON line, not whatever a tool said on stderr next to it (a heartbeat replaced
        # on gcsfuse can vanish between test and grep for a moment).
        lines = [line for line in result.output.splitlines() if line.startswith("{")]
        try:
            data = json.loads(lines[-1])
        except (IndexError, ValueError):
            out.append(HostStatus(result.index, "unreachable",
                                  error=f"unreadable status: {result.output.strip()[-200:]!r}"))
            continue
        out.append(HostStatus(result.index, data["state"], data["exit_code"], data["pid"],
                              data["log_bytes"], step=data.get("step"), total=data.get("total"),
                              resumed_from=data.get("resumed_from"), ended_at=data.get("ended_at"),
                              log_tail=_decoded(data.get("log_tail")), log_age=data.get("log_age"),
                              progress_age=data.get("progress_age"), reported=_reported(data.get("reported"))))
    return out


def _reported(raw) -> dict[str, int] | None:
    """status.sh's `reported`: the ledger's keys with whole numbers, anything else dropped."""
    if not isinstance(raw, dict):
        return None
    out = {k: v for k, v in raw.items() if k in contract.LEDGER_KEYS and isinstance(v, int)}
    return out or None


def _decoded(tail_b64) -> str:
    try:
        return base64.b64decode(tail_b64 or "", validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError, TypeError):
        return ""


def clean(group: HostGroup, attempt: HostAttempt, *, grace_seconds: float = 10,
          log_paths: LogPaths = None, timeout: float = 120) -> list[HostResult]:
    """Make every host fit for a launch: the programs of earlier attempts of this job and every
    process holding an accelerator device (/dev/accel*, /dev/vfio/*) ended, waited for, and
    libtpu's lock removed (templates/clean.sh). Each host answers one JSON line: the pids ended."""
    script = render("stop_group.sh") + render("clean.sh", job_dir=attempt.host_dir, attempt=attempt.attempt,
                                              grace_tenths=max(0, math.ceil(grace_seconds * 10)))
    return group.run(as_command(script, "tpujob-clean"), log_paths=log_paths, timeout=timeout)


def _env(group: HostGroup, attempt: HostAttempt) -> Callable[[Host], bytes]:
    return lambda host: env_payload(attempt.environment(host, len(group.hosts)))
