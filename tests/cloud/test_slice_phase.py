"""The one table from Cloud TPU states to slice phases."""

from __future__ import annotations

import pytest

from tpujob.cloud.base import NODE_PHASES, QUEUED_RESOURCE_PHASES, SlicePhase, slice_phase


def test_every_api_state_has_a_phase():
    from google.cloud import tpu_v2

    assert set(NODE_PHASES) == {s.name for s in tpu_v2.Node.State}
    assert set(QUEUED_RESOURCE_PHASES) == {s.name for s in tpu_v2.QueuedResourceState.State}


@pytest.mark.parametrize("node, qr, phase", [
    (None, None, SlicePhase.GONE),
    ("CREATING", None, SlicePhase.PROVISIONING),
    ("READY", None, SlicePhase.READY),
    ("PREEMPTED", None, SlicePhase.PREEMPTED),
    ("TERMINATED", None, SlicePhase.PREEMPTED),
    ("DELETING", None, SlicePhase.DELETING),
    ("UNKNOWN", None, SlicePhase.FAILED),
    (None, "ACCEPTED", SlicePhase.QUEUED),
    (None, "WAITING_FOR_RESOURCES", SlicePhase.QUEUED),
    ("CREATING", "PROVISIONING", SlicePhase.PROVISIONING),
    ("CREATING", "ACTIVE", SlicePhase.PROVISIONING),
    ("READY", "ACTIVE", SlicePhase.READY),
    (None, "ACTIVE", SlicePhase.FAILED),
    ("PREEMPTED", "SUSPENDED", SlicePhase.PREEMPTED),
    (None, "SUSPENDED", SlicePhase.PREEMPTED),
    (None, "FAILED", SlicePhase.FAILED),
    ("READY", "DELETING", SlicePhase.DELETING),
    ("READY", "SOMETHING_NEW", SlicePhase.FAILED),
])
def test_slice_phase(node, qr, phase):
    assert slice_phase(node, qr) is phase

