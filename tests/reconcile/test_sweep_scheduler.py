"""The lab's scheduler in real sweeps against the in-process emulator (hosts stubbed): QUEUED jobs
admitted within the quota and never sent to Google beyond it, why the others wait, a high band
evicting the newest low job, and two processes sweeping one store never over-admitting."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sweep import PROJECT, Hosts, cloud_for, spec

from tpujob import spec as spec_mod
from tpujob.reconcile.reconciler import Reconciler
from tpujob.store.repository import open_store
from tpujob.store.states import State

HERE = Path(__file__).parent


class Clock:
    """The store's and the sweep's clock, moved on by the test (the minimum run time)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    return open_store(f"sqlite:///{tmp_path / 'tpujob.db'}", clock=clock)


def queue_job(store, name, *, priority="normal", owner="alice"):
    text = spec(name=name) + f"priority: {priority}\n"
    parsed, lines = spec_mod.parse(text)
    resolved = spec_mod.resolve(parsed, lines, default_project=PROJECT)
    return store.add_job(name=name, spec_yaml=text, spec_json=json.dumps(resolved.to_json_dict()),
                         accelerator=resolved.accelerator, zone=resolved.zone, project=PROJECT, cloud="local",
                         owner=owner, priority=priority, queued=True)


class StopHosts(Hosts):
    def __init__(self) -> None:
        super().__init__()
        self.stopped: list[int] = []

    def stop_program(self, job, attempt, slice_, grace_seconds=30):
        self.stopped.append(job.id)


def test_queued_jobs_are_admitted_within_the_quota_and_the_rest_wait(server, store):
    store.set_quota("v4", 8, region="us-central2")  # two v4-8 (4 chips each)
    a, b, c = (queue_job(store, n, owner=o) for n, o in (("a", "alice"), ("b", "bob"), ("c", "carol")))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    report = rec.sweep()
    assert report.admitted == 2
    assert [store.get(j.id).state for j in (a, b, c)] == ["RUNNING", "RUNNING", "QUEUED"]
    # Never sent to Google: no attempt, no node of its own.
    assert store.current_attempt(c.id) is None
    assert len(server.emulator.list_nodes(f"projects/{PROJECT}/locations/us-central2-b")) == 2
    assert store.get(c.id).waiting_for == ("quota: 8/8 v4 chips in us-central2 held by alice 4, bob 4; "
                                           "1st in band normal")
    rec.sweep()
    assert store.get(c.id).state == "QUEUED"

    # Cancelled, a job keeps its slice (for `resume`) and so its chips at Google.
    store.transition(a.id, State.RUNNING, State.CANCELLED, "cancelled by test")
    rec.sweep()
    assert store.get(c.id).state == "QUEUED"
    # Deleted, it frees them: they go to the job waiting.
    store.transition(a.id, State.CANCELLED, State.DELETED, "deleted by test")
    rec.sweep()
    assert store.get(c.id).state == "RUNNING"
    assert store.get(c.id).waiting_for is None
    assert [e.message for e in store.events(c.id) if e.to_state == "PENDING"] == ["admitted: within the lab's quota"]
