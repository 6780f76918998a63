"""Known bad-host signatures: lines in a failed program's log that say the host, not the program,
is at fault (its TPU held by another process). An attempt whose log shows one ends `bad_host`:
its slice is replaced, never set up again (reconcile/decide.py), counted in requeue.max_bad_hosts
(reconcile/budgets.py).

Each signature carries its source: the issue that quotes the wording. A new one goes here, with
its source, and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_CHARS = 300  # the matched line, as shown in the event: its end is kept


@dataclass(frozen=True)
class Signature:
    pattern: re.Pattern
    source: str


SIGNATURES: tuple[Signature, ...] = (
    # libtpu's lock is held (its pid found by scanning /proc for the device's holders):
    # "Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid
    # 176028. Not attempting to load libtpu.so in this process." [jax-ml/jax#22070] (the lock and
    # the /proc scan: tensorflow/tensorflow#55429, tpu_initializer_helper.cc TryAcquireTpuLock)
    Signature(re.compile(r"TPU is already in use by process with pid"), "jax-ml/jax#22070"),
    # The older wording of the same (libtpu before 2022): "libtpu.so already in use by another
    # process probably owned by another user. Run "$ sudo lsof -w /dev/accel0" to figure out which
    # process is using the TPU." [jax-ml/jax#10192, pytorch/xla#3214]
    Signature(re.compile(r"libtpu\.so already in use by another process"), "jax-ml/jax#10192"),
    # vfio chips (v5e, v5p, v6e): "TPU initialization failed: open(/dev/vfio/1): Device or resource
    # busy: Device or resource busy; Couldn't open iommu group /dev/vfio/1"
    # [marin-community/marin#2618, google/gvisor#11545]
    Signature(re.compile(r"Couldn't open iommu group"), "marin-community/marin#2618"),
    Signature(re.compile(r"open\(/dev/(?:vfio/\d+|accel\d+)\): Device or resource busy"),
              "marin-community/marin#2618"),
)


def bad_host_line(log_text: str) -> str | None:
    """The last line of `log_text` matching a known bad-host signature (bounded), or None.
    The caller masks it like any log line it shows."""
    for line in reversed(log_text.splitlines()):
        if any(s.pattern.search(line) for s in SIGNATURES):
            line = line.strip()
            return line if len(line) <= MAX_LINE_CHARS else "…" + line[-(MAX_LINE_CHARS - 1):]
    return None
