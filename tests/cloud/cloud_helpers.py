"""Shared by the cloud tests: the project and zone they use, and polling a slice to its end."""

from __future__ import annotations

import time

from tpujob.cloud.base import SlicePhase

PROJECT = "tpujob-test"
ZONE = "us-central2-b"


def wait_for_slice(cloud, name: str, timeout: float, on_change=None, slices: int = 1):
    """Poll get_slice until READY or a terminal phase (what the reconcile sweep observes)."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        current = cloud.get_slice(PROJECT, ZONE, name, slices=slices)
        state = (current.phase, current.node_state, current.queued_resource_state)
        if on_change and state != last:
            on_change(current)
        last = state
        if current.phase in (SlicePhase.READY, SlicePhase.PREEMPTED, SlicePhase.FAILED, SlicePhase.GONE):
            return current
        assert time.monotonic() < deadline, f"slice {name} still {current.phase.value}"
        time.sleep(0.01)
