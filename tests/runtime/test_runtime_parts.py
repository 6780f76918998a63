"""In-process tests of the runtime's parts: preset sizes, MFU and peaks, the MXU warning, the
learning-rate schedule, checkpoint pruning, the environment's coordinator, SIGTERM handling."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from runtime_helpers import REPO

from tpujob.runtime import peaks
from tpujob.runtime.config import PRESETS, ConfigError, ModelConfig, config_from_dict
from tpujob.runtime.distributed import read_env


def _model(preset: str) -> ModelConfig:
    return ModelConfig(preset=preset, **PRESETS[preset])


@pytest.mark.parametrize("preset, millions", [("tiny", 0.59), ("124m", 124), ("350m", 350), ("1b", 1100)])
def test_preset_parameter_counts_at_seq_len_1024(preset, millions):
    from tpujob.runtime import model

    count = model.param_count(_model(preset), 1024)  # from the shapes: nothing is allocated
    assert abs(count / 1e6 - millions) / millions < 0.06, count


def test_tiny_count_matches_the_shapes_by_hand():
    from tpujob.runtime import model

    D, F, V, L, T = 128, 512, 512, 2, 1024
    per_layer = D * 3 * D + D * D + 2 * D * F + 4 * D
    assert model.param_count(_model("tiny"), T) == V * D + T * D + L * per_layer + 2 * D == 591_104


def test_gpu_peaks_and_device_kinds():
    assert peaks.peak_flops(peaks.generation("h200")) == 989e12
    assert peaks.peak_flops(peaks.generation("a100")) == 312e12
    assert peaks.peak_flops(peaks.generation("gpu-h100-pcie")) == 756e12
    assert peaks.generation_from_device_kind("NVIDIA H200") == "h200"
    assert peaks.generation_from_device_kind("NVIDIA A100-SXM4-80GB") == "a100"
    assert peaks.generation_from_device_kind("NVIDIA H100 PCIe") == "h100-pcie"
    assert peaks.generation_from_device_kind("NVIDIA H100 80GB HBM3") == "h100"


def test_mfu_counts_chips_not_devices():
    flops, tps = 1e9, 1e4  # 1e13 model FLOP/s
    # v3-8: 4 chips, 8 TensorCores, and JAX shows 8 devices: the per-chip peak covers 2 of them.
    assert peaks.chips("v3", 8) == 4
    assert peaks.mfu(flops, tps, "v3", 8) == pytest.approx(1e13 / (123e12 * 4))
    assert peaks.mfu(flops, tps, "v2", 8) == pytest.approx(1e13 / (45e12 * 4))
    # v4 and v5p (megacore), v5e, v6e and GPUs: one device per chip.
    assert peaks.mfu(flops, tps, "v4", 4) == pytest.approx(1e13 / (275e12 * 4))
    assert peaks.mfu(flops, tps, "h200", 1) == pytest.approx(1e13 / 989e12)
    assert peaks.mfu(flops, tps, None, 8) is None  # cpu: no peak
    assert peaks.mfu(flops, 0.0, "v4", 4) is None


def test_mxu_warning_names_the_misaligned_dims():
    from tpujob.runtime.loop import mxu_warning

    aligned = config_from_dict({"model": "124m"})  # 768, 3072, 50304: multiples of 128
    assert mxu_warning(aligned, "v4") is None
    warning = mxu_warning(aligned, "v6e")  # v6e's MXU is 256 wide: 768 and 3072 are fine, not 50304
    assert warning == "dims not multiples of 256 pad the MXU: vocab_size=50304"
    odd = config_from_dict({"model": {"preset": "tiny", "d_model": 96, "n_head": 2}})
    assert mxu_warning(odd, None) == "dims not multiples of 128 pad the MXU: d_model=96"


def test_schedule_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    from tpujob.runtime.train import make_schedule

    cfg = config_from_dict({"steps": 110, "optimizer": {"lr": 1e-3, "warmup_steps": 10,
                                                         "min_lr_ratio": 0.1}})
    lr = make_schedule(cfg)
    assert float(lr(0)) == 0.0
    assert float(lr(5)) == pytest.approx(5e-4)
    assert float(lr(10)) == pytest.approx(1e-3)
    # Halfway through the cosine (step 10 + 50 of 100): the mean of peak and floor.
    assert float(lr(60)) == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4), rel=1e-5)
    assert float(lr(110)) == pytest.approx(1e-4)
    assert float(lr(500)) == pytest.approx(1e-4)  # stays at the floor past decay_steps


def test_checkpoints_keep_only_the_last_k(tmp_path):
    import jax.numpy as jnp

    from tpujob.runtime.checkpoint import Checkpointer

    ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=2, use_async=True)
    for step in (1, 2, 3, 4, 5):
        ckpt.save(step, {"w": jnp.full((4,), float(step)), "step": jnp.asarray(step)})
    ckpt.wait()
    ckpt.close()
    assert sorted(int(p.name) for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == [4, 5]
    again = Checkpointer(str(tmp_path / "ckpt"), keep=2, use_async=False)
    assert again.latest_step() == 5
    again.close()


def test_a_step_directory_without_its_commit_file_is_not_restored(tmp_path):
    """What a host killed mid-save leaves on gcsfuse (it renames a directory by copying each
    object, then deleting): a step directory holding some of its arrays. It is not the latest;
    the step before it restores, and the step can be saved again."""
    import shutil

    import jax.numpy as jnp

    from tpujob.runtime.checkpoint import Checkpointer

    def state(step):
        return {"w": jnp.full((4,), float(step)), "b": jnp.zeros((2,)), "step": jnp.asarray(step)}

    ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=3, use_async=False)
    for step in (10, 20):
        ckpt.save(step, state(step))
    ckpt.wait()
    ckpt.close()
    partial = tmp_path / "ckpt" / "30"
    shutil.copytree(tmp_path / "ckpt" / "20", partial)
    for marker in partial.rglob("commit_success.txt"):
        marker.unlink()
    shards = [p for p in (partial / "default").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert shards
    for shard in shards[::2]:  # the copy was cut short: half of the array data is missing
        shard.unlink()
    again = Checkpointer(str(tmp_path / "ckpt"), keep=3, use_async=False)
    assert again.latest_step() == 20
    assert float(again.restore(20, state(0))["w"][0]) == 20.0
    again.save(30, state(30))
    again.wait()
    assert again.latest_step() == 30 and float(again.restore(30, state(0))["w"][0]) == 30.0
    again.close()


@pytest.mark.parametrize("address", ["not-a-host", "host:", ":8476", "host:port", "host:0",
                                     "host:70000", "two words:80"])
def test_a_malformed_coordinator_is_a_config_error_naming_it(address, tmp_path):
    env = {"TPUJOB_RUN_DIR": str(tmp_path), "TPUJOB_NUM_HOSTS": "2", "TPUJOB_COORDINATOR": address}
    with pytest.raises(ConfigError, match="must be host:port") as info:
        read_env(env)
    assert info.value.key == "TPUJOB_COORDINATOR"


def test_coordinator_addresses_that_jax_takes():
    for address in ("127.0.0.1:8476", "t1v-n-0:8476", "[fe80::1]:8476"):
        assert read_env({"TPUJOB_RUN_DIR": "/r", "TPUJOB_NUM_HOSTS": "2",
                         "TPUJOB_COORDINATOR": address}).coordinator == address


def test_heartbeat_interval_is_bounded_by_the_contract():
    from tpujob.runtime.contract import HEARTBEAT_MAX_INTERVAL_S

    config_from_dict({"heartbeat_every_s": HEARTBEAT_MAX_INTERVAL_S})
    with pytest.raises(ConfigError, match=f"<= {HEARTBEAT_MAX_INTERVAL_S}"):
        config_from_dict({"heartbeat_every_s": HEARTBEAT_MAX_INTERVAL_S + 1})


# A process that installs the runtime's SIGTERM handling, then blocks inside C code
# (pthread_cond_wait restarts after a signal and never returns to Python): where the train loop
# sits in a collective whose peer is gone, or in a write to a hung mount.
_BLOCKED = """
import ctypes, sys
from tpujob.runtime.preemption import Preemption
p = Preemption(grace_s=float(sys.argv[1]))
libc = ctypes.CDLL(None)
mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
print("blocked", flush=True)
libc.pthread_cond_wait(cond, mutex)
"""


def _blocked(grace_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED, str(grace_s)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "blocked\n", proc.stderr.read()
    return proc


def _alive_after(proc: subprocess.Popen, seconds: float) -> bool:
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        return True


def test_a_second_sigterm_ends_a_blocked_process():
    proc = _blocked(grace_s=600)
    try:
        proc.send_signal(signal.SIGTERM)
        assert _alive_after(proc, 1.0)  # the first one asks for a checkpoint: not a kill
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert "second SIGTERM" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_the_grace_deadline_ends_a_process_blocked_after_one_sigterm():
    proc = _blocked(grace_s=1.5)
    try:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == -signal.SIGTERM  # the timeout bounds a hang only
        assert time.monotonic() - started >= 1.4  # not before the grace (load cannot fail a lower bound)
        assert "still running" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_preemption_sets_the_flag_and_restores_the_previous_handler():
    code = """
import os, signal, time
from tpujob.runtime.preemption import Preemption
before = signal.getsignal(signal.SIGTERM)
p = Preemption(grace_s=600)
os.kill(os.getpid(), signal.SIGTERM)
deadline = time.time() + 5
while not p.requested and time.time() < deadline:
    time.sleep(0.01)
p.restore()
assert p.requested and signal.getsignal(signal.SIGTERM) is before
assert signal.set_wakeup_fd(-1) == -1
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


class _SlowSave:
    """A checkpointer whose async save of some step is still being written."""

    def __init__(self, in_flight: bool, seconds: float):
        import time

        self._in_flight, self.waited = in_flight, False
        self.save_started = time.perf_counter() - seconds  # began `seconds` ago

    def in_flight(self) -> bool:
        return self._in_flight

    def wait(self) -> None:
        self.waited = True


class _Notice:
    def __init__(self, left: float):
        self.left = left

    def seconds_left(self) -> float:
        return self.left


@pytest.mark.parametrize("in_flight,save_seconds,left,fits,waited", [
    (False, 0.0, 1.0, True, False),   # nothing in flight: save in place at once
    (True, 2.0, 20.0, True, True),    # the save in flight finished first, a second one fits
    (True, 30.0, 20.0, False, True),  # that save took longer than what is left: skip the stop save
])
def test_the_stop_save_is_skipped_only_when_a_save_in_flight_leaves_no_time_for_it(
        in_flight, save_seconds, left, fits, waited):
    from types import SimpleNamespace

    from tpujob.runtime.loop import Trainer

    trainer = SimpleNamespace(ckpt=_SlowSave(in_flight, save_seconds), _any_host=Trainer._any_host)
    assert Trainer._stop_save_fits(trainer, _Notice(left)) is fits
    assert trainer.ckpt.waited is waited


def test_accumulated_grads_are_the_mean_of_the_parts_grads(jax_here):
    import numpy as np

    from tpujob.runtime import train
    from tpujob.runtime.model import loss_fn

    cfg = config_from_dict({"model": "tiny", "batch_size": 4, "seq_len": 32})
    jax = jax_here
    params = jax.jit(train.init_state_fn(cfg))(jax.random.key(0))["params"]
    tokens = jax.random.randint(jax.random.key(1), (4, 33), 0, cfg.model.vocab_size)
    value_and_grad = jax.jit(jax.value_and_grad(lambda p, part: loss_fn(cfg.model, p, part[:, :-1], part[:, 1:])))
    loss, grads = jax.jit(lambda p, t: train.accumulated_grads(value_and_grad, p, t, 2))(params, tokens)
    # Part i is every second row from row i; the whole batch's mean is the mean of the parts'.
    (la, ga), (lb, gb) = value_and_grad(params, tokens[0::2]), value_and_grad(params, tokens[1::2])
    assert float(loss) == float((la + lb) / 2)
    for got, a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(np.asarray(got), (np.asarray(a) + np.asarray(b)) / 2, rtol=1e-6, atol=1e-9)
    # ... and is not the whole batch's bit for bit (bfloat16 sums in another order), but close.
    whole_loss, _ = value_and_grad(params, tokens)
    assert abs(float(loss) - float(whole_loss)) < 1e-5 * float(whole_loss)
