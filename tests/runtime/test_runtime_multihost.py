"""Two hosts joined by jax.distributed on 127.0.0.1 (2 CPU devices each: a 4-device mesh)."""

from __future__ import annotations

import re
import signal
import socket
import time

import pytest
from runtime_helpers import BASE, checkpoint_steps, load_checkpoint, metrics, status

from tpujob.runtime import contract

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # up to 45 s each here


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
    # JAX writes its compile cache from process 0 only: host 1 looked its compile up, and hit
    # it if an earlier run's host 0 wrote it (said so either way, not "off": the cache is on).
    assert re.search(r"\(cache (hit|miss)\)", hosts[1].stderr()), hosts[1].stderr()[-2000:]


def test_missing_peer_ends_the_process_instead_of_hanging(runtime, tmp_path):
    coordinator = f"127.0.0.1:{_free_port()}"
    lonely = runtime(tmp_path / "run", {"distributed_timeout_s": 3}, host=(0, 2, coordinator))
    code = lonely.wait(timeout=240)  # bounds a hang only
    assert code == -signal.SIGABRT, lonely.stderr()
    assert status(tmp_path / "run") is None  # no status: the orchestrator reads the signal exit


def _listeners(port: int) -> list[str]:
    """The sockets listening on `port`, from /proc/net (no connection made to them)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.split(":")[1], 16) == port:
                    found.append(f"{table}: {local}")
    return found


def _wildcard_listeners(port: int) -> list[str]:
    """Those listening on every address (0.0.0.0 or [::])."""
    return [found for found in _listeners(port) if set(found.split(": ")[1].split(":")[0]) == {"0"}]


def test_two_slices_on_one_port_and_network_stack_each_train(runtime, tmp_path):
    # The emulated hosts of every slice share one network stack, as a stale coordinator does on
    # a reused host. JAX's coordinator bound [::]:PORT with SO_REUSEPORT, so a second slice's
    # coordinator bound the same port too and the kernel spread connections between the two:
    # peers registered with the other slice's and both aborted (soak seed 11: exit 134, 19
    # attempts in a row). Each coordinator must listen on its host 0's address only.
    port = _free_port()
    slices = [[runtime(tmp_path / f"run{n}", {"steps": 4}, host=(i, 2, f"127.0.0.{n + 1}:{port}"))
               for i in range(2)] for n in range(2)]
    wildcard: list[str] = []
    deadline = time.time() + 300  # four JAX processes on a loaded 2-core machine
    while time.time() < deadline and any(h.proc.poll() is None for s in slices for h in s):
        wildcard += _wildcard_listeners(port)
        time.sleep(0.2)
    assert not wildcard, f"a coordinator listens on every address: {wildcard[:2]}"
    for n, hosts in enumerate(slices):
        assert [h.wait(timeout=300) for h in hosts] == [0, 0], hosts[0].stderr() + hosts[1].stderr()
        assert status(tmp_path / f"run{n}").state == "succeeded"


def test_a_host_blocked_behind_a_frozen_peer_prints_its_stacks_and_dies_within_the_spot_notice(
        runtime, tmp_path):
    # A hang as it looks on a slice: host 1 stops (SIGSTOP, as `tpujob emulator freeze` does),
    # host 0's main thread blocks in the next collective while its heartbeat thread beats on.
    # SIGUSR1 must print host 0's Python stacks (faulthandler: a C handler, it runs while the
    # main thread is inside XLA), and a SIGTERM must end it within Spot's 30 s notice (the
    # default sigterm_grace_s) although no step boundary comes.
    from runtime_helpers import heartbeat

    hosts = _slice(runtime, tmp_path / "run", {"steps": 100000, "checkpoint_every": 100000})
    deadline = time.time() + 240
    while time.time() < deadline:
        try:
            if heartbeat(tmp_path / "run")["step"] >= 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        assert all(h.proc.poll() is None for h in hosts), hosts[0].stderr() + hosts[1].stderr()
        time.sleep(0.2)
    hosts[1].proc.send_signal(signal.SIGSTOP)
    while time.time() < deadline:  # blocked: the step stops moving while the heartbeat goes on
        beat = heartbeat(tmp_path / "run")
        if time.time() - beat["progress_time"] > 3 and time.time() - beat["time"] < 3:
            break
        time.sleep(0.5)
    hosts[0].proc.send_signal(signal.SIGUSR1)
    time.sleep(2)
    assert hosts[0].proc.poll() is None  # the stacks did not end it
    hosts[0].proc.send_signal(signal.SIGTERM)
    code = hosts[0].wait(timeout=240)  # bounds a hang only
    err = hosts[0].stderr()
    # Ended by its own grace deadline (sigterm_grace_s, inside the notice) as the runtime counts
    # it, rather than by a clock here that a loaded machine stretches.
    assert code == -signal.SIGTERM, (code, err[-3000:])
    assert re.search(r"still running \d+ s after SIGTERM \(blocked\?\): exiting without a checkpoint", err), \
        err[-3000:]
    assert "(most recent call first)" in err and "loop.py" in err, err[-3000:]
    assert "exiting without a checkpoint" in err


def test_a_notice_while_the_hosts_join_is_kept_and_saved_at_the_first_step(runtime, tmp_path):
    # A Spot notice can come while a slice's hosts are still starting. Host 0 starts alone: its
    # coordinator listens, and it waits inside jax.distributed.initialize for host 1. A SIGTERM
    # there must not kill it (no checkpoint, no status) nor be lost (it would train on to the
    # SIGKILL): both hosts train their first step, save it, and exit as preempted.
    port = _free_port()
    host0 = runtime(tmp_path / "run", {"steps": 100000, "checkpoint_every": 100000},
                    host=(0, 2, f"127.0.0.1:{port}"))
    while not _listeners(port):
        assert host0.proc.poll() is None, host0.stderr()[-3000:]
        time.sleep(0.1)
    host0.proc.send_signal(signal.SIGTERM)
    host1 = runtime(tmp_path / "run", {"steps": 100000, "checkpoint_every": 100000},
                    host=(1, 2, f"127.0.0.1:{port}"))
    codes = [host0.wait(timeout=120), host1.wait(timeout=120)]  # bounds a hang only
    assert codes == [contract.EXIT_PREEMPTED] * 2, (codes, host0.stderr()[-3000:])
    stopped = status(tmp_path / "run")
    assert stopped.state == "preempted" and stopped.step >= 1, stopped
    assert "SIGTERM: checkpoint written" in stopped.message, stopped
    assert checkpoint_steps(tmp_path / "run") == [stopped.step]


def test_a_notice_from_outside_mid_run_stops_both_hosts_at_one_step(runtime, tmp_path):
    # The notice as Google gives it: a SIGTERM from outside, here to host 1 only, once both
    # train. With JAX's preemption service on, its handler (installed as the hosts join) took
    # the signal from the runtime's and the hosts trained on to the SIGKILL.
    from runtime_helpers import heartbeat

    hosts = _slice(runtime, tmp_path / "run", {"steps": 100000, "checkpoint_every": 100000})
    deadline = time.time() + 240  # bounds a hang only
    while True:
        try:
            if heartbeat(tmp_path / "run")["step"] >= 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        assert all(h.proc.poll() is None for h in hosts) and time.time() < deadline, hosts[0].stderr()[-3000:]
        time.sleep(0.2)
    hosts[1].proc.send_signal(signal.SIGTERM)
    codes = [h.wait(timeout=120) for h in hosts]  # bounds a hang only
    assert codes == [contract.EXIT_PREEMPTED] * 2, (codes, hosts[1].stderr()[-3000:])
    stopped = status(tmp_path / "run")
    assert stopped.state == "preempted" and checkpoint_steps(tmp_path / "run") == [stopped.step], stopped
