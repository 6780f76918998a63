"""The TPU check libtpu makes when JAX's TPU backend starts, on the emulator's hosts.

A real TPU VM needs none of this: libtpu itself refuses a TPU another process holds, and with
JAX_PLATFORMS=tpu (which tpujob sets on real TPUs) JAX raises instead of falling back to the CPU.
The emulator's hosts run the runtime on CPU, so the emulator gives each host a device file and
names it in TPUJOB_EMULATED_TPU; there, and only there, `claim` does what libtpu does:

1. libtpu's lock: /tmp/libtpu_lockfile, locked for the process's life; when another process holds
   it, the process using the TPU is found by its open device file and named: "Unable to
   initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid N. Not
   attempting to load libtpu.so in this process." (the wording: jax-ml/jax#22070; the lock and
   the /proc scan: TryAcquireTpuLock/FindLibtpuProcess in tensorflow/core/tpu/
   tpu_initializer_helper.cc, tensorflow/tensorflow#55429).
2. The device: a vfio group is opened by one process at a time, so one held by another process
   (the lock removed, the holder still alive) fails: "TPU initialization failed:
   open(/dev/vfio/0): Device or resource busy: Device or resource busy; Couldn't open iommu group
   /dev/vfio/0" (marin-community/marin#2618, google/gvisor#11545).

Both raise RuntimeError where JAX's backend start would, uncaught: the program dies with exit
code 1 and the line in its log, as on a real TPU. The lock and the device stay held until the
process ends, as libtpu holds them.
"""

from __future__ import annotations

import fcntl
import os

ENV = "TPUJOB_EMULATED_TPU"  # tpujob/emulator/machines/ssh.py EMULATED_DEVICE_ENV
LOCKFILE = "/tmp/libtpu_lockfile"
_held: list[int] = []  # the lock's and the device's descriptors: held for the process's life


def claim(lockfile: str = LOCKFILE) -> None:
    device = os.environ.get(ENV)
    if not device or _held:
        return
    lock = os.open(lockfile, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        pid = holder(device)
        raise RuntimeError("Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process "
                           f"with pid {pid if pid is not None else 'unknown'}. Not attempting to load "
                           "libtpu.so in this process.") from None
    if holder(device) is not None:
        os.close(lock)
        raise RuntimeError(f"Unable to initialize backend 'tpu': TPU initialization failed: open({device}): "
                           "Device or resource busy: Device or resource busy; Couldn't open iommu group "
                           f"{device}")
    _held.extend([lock, os.open(device, os.O_RDONLY)])


def holder(device: str) -> int | None:
    """A process other than this one with `device` open (the file itself: device and inode), or None."""
    try:
        st = os.stat(device)
    except OSError:
        return None
    me = os.getpid()
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                other = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return pid
    return None
