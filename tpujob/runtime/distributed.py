"""Start-up: who am I, where do I write, and joining the other hosts (jax.distributed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import contract
from .config import ConfigError


@dataclass(frozen=True)
class HostEnv:
    job_id: str
    attempt: int
    host_index: int
    num_hosts: int
    coordinator: str | None
    run_dir: Path
    hosts_given: bool  # False: the platform may know better (TPU VM metadata)
    num_slices: int = 1  # multislice: hosts are slice-major, num_hosts // num_slices per slice
    max_slices: int = 1  # elastic multislice: the slices it has when it has them all (TPUJOB_MAX_SLICES)


def read_env(env: Mapping[str, str]) -> HostEnv:
    """The contract's environment; only TPUJOB_RUN_DIR is required for a single host."""

    def integer(name: str, default: int) -> int:
        raw = env.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"must be an integer, got {raw!r}", key=name) from None

    run_dir = env.get(contract.ENV_RUN_DIR)
    if not run_dir:
        raise ConfigError("is not set (the directory for status, metrics, checkpoints)",
                          key=contract.ENV_RUN_DIR)
    num_hosts = integer(contract.ENV_NUM_HOSTS, 1)
    host_index = integer(contract.ENV_HOST_INDEX, 0)
    coordinator = env.get(contract.ENV_COORDINATOR) or None
    if num_hosts < 1 or not 0 <= host_index < num_hosts:
        raise ConfigError(f"host index {host_index} is outside 0..{num_hosts - 1}",
                          key=contract.ENV_HOST_INDEX)
    if num_hosts > 1 and not coordinator:
        raise ConfigError("is required with more than one host", key=contract.ENV_COORDINATOR)
    if coordinator:
        _check_address(coordinator)
    num_slices = integer(contract.ENV_NUM_SLICES, 1)
    if num_slices < 1 or num_hosts % num_slices:
        raise ConfigError(f"{num_slices} slices do not divide {num_hosts} hosts", key=contract.ENV_NUM_SLICES)
    return HostEnv(
        job_id=env.get(contract.ENV_JOB_ID, "local"),
        attempt=integer(contract.ENV_ATTEMPT, 0),
        host_index=host_index,
        num_hosts=num_hosts,
        coordinator=coordinator,
        run_dir=Path(run_dir),
        hosts_given=bool(env.get(contract.ENV_NUM_HOSTS)),
        num_slices=num_slices,
        max_slices=max(num_slices, integer(contract.ENV_MAX_SLICES, num_slices)),
    )


def _check_address(address: str) -> None:
    """host:port (or [v6 address]:port): jax would otherwise fail deep inside with an IndexError."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(c.isspace() for c in host) or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise ConfigError(f"must be host:port (host 0's address and a port), got {address!r}",
                          key=contract.ENV_COORDINATOR)


def on_tpu_vm() -> bool:
    # Decided without touching jax: initialize() must run before any backend is created.
    return os.path.exists("/dev/accel0") or bool(os.path.isdir("/dev/vfio") and os.listdir("/dev/vfio"))


def bind_address(host: HostEnv, env: Mapping[str, str]) -> str | None:
    """Where host 0's coordinator listens: host 0's own address from TPUJOB_COORDINATOR, not
    JAX's default `[::]:PORT` (every address). gRPC binds with SO_REUSEPORT, so two
    coordinators on one port and one network stack both bind, and the kernel spreads new
    connections between them: a peer registers with the other slice's coordinator and both
    abort ("Unexpected task registered", "tried to connect with a different incarnation",
    exit 134). The emulated hosts of all slices share one network stack (the soak's seed 11
    failed 19 attempts in a row so), and so does a stale coordinator on a reused host. Host
    0's address is its own on a TPU VM (the node's networkEndpoints), so nothing else changes
    there. JAX_COORDINATOR_BIND_ADDRESS, JAX's own override, still wins."""
    if host.host_index != 0 or not host.coordinator or env.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return None
    return host.coordinator


def initialize(host: HostEnv, timeout_s: int) -> None:
    """Join the slice. A peer that never comes makes jax abort the process after `timeout_s`
    (SIGABRT, not an exception): the orchestrator sees a signal exit and re-creates the slice."""
    import jax

    # JAX's preemption service (on by default) installs a SIGTERM handler of XLA's when the
    # hosts join (jax/_src/distributed.py, initialize_preemption_sync_manager), in place of the
    # one before it; a SIGTERM then only logs "SIGTERM caught" (XLA's preemption_notifier.cc)
    # for a multihost_utils.reached_preemption_sync_point this runtime never calls, and the
    # program trains on to the SIGKILL (seen: 60 s). The runtime's own listener (preemption.py),
    # on from before the join, is the one. A JAX without the option has no service to turn off.
    try:
        jax.config.update("jax_enable_preemption_service", False)
    except AttributeError:
        pass
    if host.num_hosts > 1:
        jax.distributed.initialize(
            coordinator_address=host.coordinator,
            num_processes=host.num_hosts,
            process_id=host.host_index,
            initialization_timeout=timeout_s,
            coordinator_bind_address=bind_address(host, os.environ),
        )
    elif not host.hosts_given and on_tpu_vm():
        jax.distributed.initialize(initialization_timeout=timeout_s)  # TPU metadata auto-detection
