"""The emulated hosts' TPU check (tpujob/runtime/tpu_device.py): libtpu's lock, then the device,
each refused with libtpu's own words; nothing at all where no emulated device is named."""

from __future__ import annotations

import os
import subprocess
import sys

CLAIM = ("import sys, time; from tpujob.runtime.tpu_device import claim; claim(sys.argv[1]); "
         "print('claimed', flush=True); time.sleep(60)")


def _claim(device, lock, env_extra=None):
    env = dict(os.environ, TPUJOB_EMULATED_TPU=str(device), **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-c", CLAIM, str(lock)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_claimed(proc):
    assert proc.stdout.readline().strip() == "claimed", proc.stderr.read()


def test_a_tpu_in_use_is_refused_with_libtpus_words_naming_the_holder(tmp_path):
    device, lock = tmp_path / "vfio0", tmp_path / "libtpu_lockfile"
    device.write_text("")
    first = _claim(device, lock)
    try:
        _wait_claimed(first)
        second = _claim(device, lock)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert err.strip().splitlines()[-1] == (
            "RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with "
            f"pid {first.pid}. Not attempting to load libtpu.so in this process.")
        # The lock removed (as clean.sh does) but the holder alive: the device itself is busy.
        lock.unlink()
        third = _claim(device, lock)
        _, err = third.communicate(timeout=60)
        assert third.returncode == 1
        assert err.strip().splitlines()[-1] == (
            f"RuntimeError: Unable to initialize backend 'tpu': TPU initialization failed: open({device}): Device "
            f"or resource busy: Device or resource busy; Couldn't open iommu group {device}")
    finally:
        first.kill()
        first.wait()
    # Its holder gone, the TPU is free again.
    fourth = _claim(device, lock)
    try:
        _wait_claimed(fourth)
    finally:
        fourth.kill()
        fourth.wait()


def test_no_emulated_device_no_check(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TPUJOB_EMULATED_TPU"}
    out = subprocess.run([sys.executable, "-c", "from tpujob.runtime.tpu_device import claim, _held; "
                          f"claim({str(tmp_path / 'lock')!r}); print(_held)"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]"
    assert not (tmp_path / "lock").exists()
