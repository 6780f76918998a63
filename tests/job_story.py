"""A job's night pinned by hand (a preemption, then a second attempt running), shared by the
timeline and dashboard tests."""

from __future__ import annotations

import time

import pytest

from tpujob.service.context import Context
from tpujob.store.states import State

SPEC = """\
name: night
tpu: {accelerator: v4-8, zone: us-central2-b, provisioning: on-demand}
run: {command: train}
"""


@pytest.fixture
def story(spec_file):
    """Created at T+1000 (T: now - 1200 s, so `show`'s now is about T+1200); attempt 1
    provisions at 1010, sets up at 1020, runs 1080-1090 and is preempted; attempt 2 starts at
    1130 and runs from 1150."""
    from tpujob.service import jobs

    T = time.time() - 1200.0
    now = [T + 1000.0]
    ctx = Context.load()
    ctx.store.clock = lambda: now[0]
    job, _ = jobs.record(ctx, str(spec_file(SPEC)))
    store = ctx.store
    for at, step in ((1010.0, lambda: store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go",
                                                         zone="us-central2-b", accelerator="v4-8", queued=False)),
                     (1020.0, lambda: store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")),
                     (1080.0, lambda: store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")),
                     (1090.0, lambda: store.transition(job.id, State.RUNNING, State.RECOVERING, "preempted",
                                                       preemptions=1)),
                     (1090.0, lambda: store.end_attempt(job.id, 1, "preempted")),
                     (1130.0, lambda: store.start_attempt(job.id, State.RECOVERING, State.PROVISIONING, "again",
                                                         zone="us-central2-b", accelerator="v4-8", queued=False)),
                     (1140.0, lambda: store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")),
                     (1150.0, lambda: store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched"))):
        now[0] = T + at
        step()
    return ctx, store.get(job.id), T
