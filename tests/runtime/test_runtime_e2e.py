"""The runtime as a process: one host, preemption (SIGTERM, SIGKILL), NaN, init check, shapes."""

from __future__ import annotations

import math
import signal
import time

import numpy as np
import pytest
from runtime_helpers import BASE, assert_bit_equal, checkpoint_steps, heartbeat, load_checkpoint, metrics, status

from tpujob.runtime import contract

# Microbatches against the whole batch: 5.5e-5 relative at most over 12 steps (measured). Random
# tokens keep the loss near ln(vocab), so this is a check of the plumbing; the arithmetic is
# test_runtime_parts.py::test_accumulated_grads_are_the_mean_of_the_parts_grads.
LOSS_RTOL = 1e-3

# The tests compared with `reference` (a session fixture: one run per xdist worker that asks for
# it) run on one worker, so the reference program runs once, not once a worker (three times, at
# 18-19 s each, in a cold run of the suite).
ON_THE_REFERENCES_WORKER = pytest.mark.xdist_group("runtime-reference")


@ON_THE_REFERENCES_WORKER
def test_single_process_trains_and_reports(runtime, tmp_path, reference):
    run = runtime(tmp_path / "run")
    assert run.wait() == contract.EXIT_SUCCESS, run.stderr()
    st = status(run.run_dir)
    assert (st.state, st.step, st.compiles, st.resumed_from) == ("succeeded", 12, 1, None)
    records = metrics(run.run_dir)
    assert [r["step"] for r in records] == list(range(1, 13))
    assert all(math.isfinite(r["loss"]) and r["compiles"] == 1 for r in records)
    assert records[-1]["tokens_per_s"] > 0 and records[-1]["mfu"] is None  # cpu: no peak
    assert checkpoint_steps(run.run_dir) == [4, 8, 12]
    beat = heartbeat(run.run_dir)
    assert beat["step"] == 12 and beat["total"] == 12 and beat["time"] <= time.time()
    # Deterministic: a second run from scratch equals the reference bit for bit.
    assert_bit_equal(load_checkpoint(run.run_dir, 12), reference)


@ON_THE_REFERENCES_WORKER
def test_sigterm_checkpoints_at_step_boundary_and_resumes_exactly(runtime, tmp_path, reference):
    run = runtime(tmp_path / "run", {"inject_sigterm_at_step": 6})
    assert run.wait() == contract.EXIT_PREEMPTED, run.stderr()
    st = status(run.run_dir)
    assert st.state == "preempted" and 6 <= st.step < 12
    assert st.step in checkpoint_steps(run.run_dir)

    again = runtime(tmp_path / "run", {"inject_sigterm_at_step": 6})
    assert again.wait() == contract.EXIT_SUCCESS, again.stderr()
    resumed = status(again.run_dir)
    assert (resumed.state, resumed.step, resumed.resumed_from) == ("succeeded", 12, st.step)
    assert_bit_equal(load_checkpoint(again.run_dir, 12), reference)


@ON_THE_REFERENCES_WORKER
def test_sigkill_resumes_from_last_periodic_checkpoint(runtime, tmp_path, reference):
    run = runtime(tmp_path / "run", {"inject_sigkill_at_step": 10})
    assert run.wait() == -signal.SIGKILL
    saved = checkpoint_steps(run.run_dir)
    assert saved and max(saved) in (4, 8)  # 8's async write may not have committed

    again = runtime(tmp_path / "run")
    assert again.wait() == contract.EXIT_SUCCESS, again.stderr()
    assert status(again.run_dir).resumed_from == max(saved)
    assert_bit_equal(load_checkpoint(again.run_dir, 12), reference)


def test_real_sigterm_from_outside(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"steps": 100_000, "checkpoint_every": 1000})
    deadline = time.time() + 60
    while not [r for r in metrics(run.run_dir) if r["step"] >= 2]:
        assert run.proc.poll() is None and time.time() < deadline, run.stderr()
        time.sleep(0.1)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == contract.EXIT_PREEMPTED, run.stderr()
    st = status(run.run_dir)
    assert st.state == "preempted" and checkpoint_steps(run.run_dir) == [st.step]


def test_nan_exits_with_nan_code_and_never_saves_bad_state(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"inject_nan_at_step": 7})
    assert run.wait() == contract.EXIT_NAN, run.stderr()
    st = status(run.run_dir)
    assert (st.state, st.step) == ("nan", 7)
    assert checkpoint_steps(run.run_dir) == [4]
    assert all(np.isfinite(a).all() for a in load_checkpoint(run.run_dir, 4).values())
    assert "last good checkpoint 4" in st.message


def test_wrong_initializer_is_refused_before_step_1(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"inject_bad_init": True})
    assert run.wait() == contract.EXIT_INIT_CHECK
    err = run.stderr()
    st = status(run.run_dir)
    assert st.state == "failed" and "blocks.w1" in st.message
    table = st.extra["init_check"]
    assert "blocks.w1" in table and "std" in table and "wte" in table  # the whole table
    assert [line for line in table.splitlines() if not line.endswith("ok")][1:] == [
        line for line in table.splitlines() if line.startswith("blocks.w1")]
    assert "refused before step 1" in err
    assert metrics(run.run_dir) == [] and checkpoint_steps(run.run_dir) == []


def test_shape_change_is_reported_as_recompile(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"inject_shape_change_at_step": 3, "steps": 5})
    assert run.wait() == contract.EXIT_SUCCESS, run.stderr()
    assert status(run.run_dir).compiles == 2
    assert [r["compiles"] for r in metrics(run.run_dir)] == [1, 1, 2, 2, 2]


def test_shape_change_refused_with_strict_shapes(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"inject_shape_change_at_step": 3, "strict_shapes": True})
    assert run.wait() == contract.EXIT_RECOMPILE, run.stderr()
    st = status(run.run_dir)
    assert st.state == "failed" and "strict_shapes" in st.message
    assert (st.step, st.compiles) == (2, 1)  # where training stood, not 0
    assert f"({BASE['batch_size']}, {BASE['seq_len'] // 2 + 1})" in st.message


def test_invalid_config_names_the_key(runtime, tmp_path):
    run = runtime(tmp_path / "run", {"checkpoint_evry": 5})
    assert run.wait() == contract.EXIT_CONFIG
    st = status(run.run_dir)
    assert st.state == "failed" and st.message.startswith("checkpoint_evry: unknown key")


def test_a_malformed_coordinator_is_a_config_failure_with_a_status(runtime, tmp_path):
    run = runtime(tmp_path / "run", host=(0, 2, "not-a-host"))
    assert run.wait() == contract.EXIT_CONFIG
    err = run.stderr()
    assert "Traceback" not in err and "TPUJOB_COORDINATOR: must be host:port" in err
    st = status(run.run_dir)
    assert (st.state, st.step, st.exit_code) == ("failed", 0, contract.EXIT_CONFIG)
    assert st.message == "TPUJOB_COORDINATOR: must be host:port (host 0's address and a port), got 'not-a-host'"


def test_the_metadata_servers_preempted_notice_stops_it_like_sigterm(runtime, tmp_path, stand_in):
    # A Spot VM's metadata server reads instance/preempted TRUE from the notice on; the runtime
    # polls it (GCE_METADATA_HOST: here a loopback server of the test's) and checkpoints and
    # stops as on SIGTERM. Only requests with Metadata-Flavor: Google are answered.
    asked: list[str] = []

    def training() -> bool:
        try:
            return heartbeat(tmp_path / "run")["step"] >= 2
        except (OSError, ValueError, KeyError):
            return False

    def metadata(request) -> tuple[int, bytes, dict[str, str]]:
        asked.append(f"{request.path} {request.headers.get('Metadata-Flavor')}")
        body = b"TRUE" if training() else b"FALSE"  # the notice comes mid-run
        return 200 if request.headers.get("Metadata-Flavor") == "Google" else 403, body, {}

    server = stand_in(metadata)
    run = runtime(tmp_path / "run", {"steps": 100000, "checkpoint_every": 100000, "preempted_poll_s": 0.2},
                  env_extra={"GCE_METADATA_HOST": server.url.removeprefix("http://")})
    assert run.wait(timeout=300) == contract.EXIT_PREEMPTED, run.stderr()
    st = status(run.run_dir)
    assert st.state == "preempted" and 0 < st.step < 100000
    assert st.message == f"metadata instance/preempted is TRUE: checkpoint written at step {st.step}"
    assert checkpoint_steps(run.run_dir) == [st.step]
    assert set(asked) == {"/computeMetadata/v1/instance/preempted Google"}


def test_microbatches_accumulate_to_the_same_training_as_the_whole_batch(runtime, tmp_path):
    # Two microbatches of 2 rows (1 per device) against the batch of 4 at once: the same rows and
    # the same mean, summed in another order. The model computes in bfloat16, so the gradients
    # differ by about its epsilon (2^-8, measured 0.2% to 0.5% at step 1) and the losses by far
    # less; a wrong accumulation (a part dropped or counted twice, the sum not averaged) moves
    # the loss by percents from the first steps.
    whole, parts = runtime(tmp_path / "whole"), runtime(tmp_path / "parts", {"microbatches": 2})
    assert whole.wait() == contract.EXIT_SUCCESS, whole.stderr()
    assert parts.wait() == contract.EXIT_SUCCESS, parts.stderr()
    expected = {r["step"]: r["loss"] for r in metrics(tmp_path / "whole")}
    got = {r["step"]: r["loss"] for r in metrics(tmp_path / "parts")}
    assert sorted(got) == sorted(expected) == list(range(1, 13))
    gap = max(abs(got[s] - expected[s]) / expected[s] for s in expected)
    assert gap < LOSS_RTOL, gap

    refused = runtime(tmp_path / "refused", {"microbatches": 4})  # 4 rows cannot be 4 x 2 devices
    assert refused.wait() == contract.EXIT_CONFIG
    assert status(refused.run_dir).message == "batch_size: 4 is not a multiple of 4 microbatches x 2 devices"


def test_checkpoint_every_auto_spaces_saves_by_young_s_interval(runtime, tmp_path):
    """The program measures its save's stall (C), takes the M tpujob handed it, and reports both
    with the interval it chose (sqrt(2*C*M), bounded) and where its time went, for the ledger."""
    mtbi = 10**6
    run = runtime(tmp_path / "run", {"checkpoint_every": "auto"},
                  env_extra={contract.ENV_MTBI_SECONDS: str(mtbi)})
    assert run.wait() == contract.EXIT_SUCCESS, run.stderr()
    beat = heartbeat(run.run_dir)
    assert beat["mtbi_ms"] == mtbi * 1000
    save = beat["save_ms"] / 1000
    expected = math.sqrt(2 * save * mtbi)
    assert 60 < expected < 6 * 3600  # inside the bounds: the formula is what is checked, not a bound
    assert beat["interval_ms"] / 1000 == pytest.approx(expected, rel=0.2)
    assert beat["compile_ms"] > 0 and beat["step_ms"] > 0 and beat["checkpoint_ms"] >= beat["save_ms"]
    # 12 quick steps, far inside the first interval (60 s until C is measured): the last step's only
    assert checkpoint_steps(run.run_dir) == [12]
