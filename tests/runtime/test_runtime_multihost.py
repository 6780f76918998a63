"""Two hosts joined by jax.distributed on 127.0.0.1 (2 CPU devices each: a 4-device mesh)."""

from __future__ import annotations

import signal
import socket
import time

import pytest

from runtime_helpers import BASE, checkpoint_steps, load_checkpoint, metrics, status
from tpujob.runtime import contract

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slice(runtime, run_dir, overrides=None):
    coordinator = f"127.0.0.1:{_free_port()}"
    return [runtime(run_dir, overrides, host=(i, 2, coordinator)) for i in range(2)]


def test_two_hosts_train_and_stop_together_on_one_hosts_sigterm(runtime, tmp_path):
    # One slice launch (tens of seconds on 2 cores): training across both hosts, metrics from
    # host 0 only, and the preemption consensus. Exact resume is covered on one host.
    # The drill signals host 0 only; host 1 learns it through the step and saves the same step.
    hosts = _slice(runtime, tmp_path / "run", {"inject_sigterm_at_step": 6})
    assert [h.wait() for h in hosts] == [contract.EXIT_PREEMPTED] * 2, hosts[1].stderr()
    stopped = status(tmp_path / "run")
    assert stopped.state == "preempted" and 6 <= stopped.step < BASE["steps"]
    assert checkpoint_steps(tmp_path / "run") == [4, stopped.step]
    assert [r["step"] for r in metrics(tmp_path / "run")] == list(range(1, stopped.step + 1))
    state = load_checkpoint(tmp_path / "run", stopped.step)
    assert int(state["['step']"]) == stopped.step


def test_missing_peer_ends_the_process_instead_of_hanging(runtime, tmp_path):
    coordinator = f"127.0.0.1:{_free_port()}"
    lonely = runtime(tmp_path / "run", {"distributed_timeout_s": 3}, host=(0, 2, coordinator))
    started = time.time()
    code = lonely.wait(timeout=60)
    assert code == -signal.SIGABRT, lonely.stderr()
    assert time.time() - started < 60
    assert status(tmp_path / "run") is None  # no status: the orchestrator reads the signal exit
