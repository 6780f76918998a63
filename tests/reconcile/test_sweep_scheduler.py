"""The lab's scheduler in real sweeps against the in-process emulator (hosts stubbed): QUEUED jobs
admitted within the quota and never sent to Google beyond it, why the others wait, a high band
evicting the newest low job, and two processes sweeping one store never over-admitting."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_sweep import PROJECT, Hosts, cloud_for, spec

from tpujob import spec as spec_mod
from tpujob.reconcile.reconciler import Reconciler
from tpujob.store.repository import open_store
from tpujob.store.states import AttemptEnd, State

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


@pytest.fixture(params=["sqlite", "postgresql"])
def lab_url(request, tmp_path) -> str:
    """A lab's store: a SQLite file, and a fresh database on a real PostgreSQL server (there,
    admissions serialise on the quota rows' lock instead of SQLite's write lock)."""
    return f"sqlite:///{tmp_path / 'lab.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def queue_job(store, name, *, priority="normal", owner="alice", extra=""):
    text = spec(name=name) + f"priority: {priority}\n" + extra
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
    assert len(server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/us-central2-b")) == 2
    assert store.get(c.id).waiting_for == ("quota: 8/8 v4 chips in us-central2 held by alice 4, bob 4; "
                                           "1st in band normal")
    rec.sweep()
    assert store.get(c.id).state == "QUEUED"

    # Cancelled, a job keeps its slice (for `resume`) and so its chips at Google.
    with store.atomic():
        store.end_attempt(a.id, 1, AttemptEnd.CANCELLED)
        store.transition(a.id, State.RUNNING, State.CANCELLED, "cancelled by test")
    rec.sweep()
    assert store.get(c.id).state == "QUEUED"
    # Deleted, it frees them: they go to the job waiting.
    store.transition(a.id, State.CANCELLED, State.DELETED, "deleted by test")
    assert a.id not in [j.id for j in store.holding_jobs()]
    rec.sweep()
    assert store.get(c.id).state == "RUNNING"
    assert store.get(c.id).waiting_for is None
    assert [e.message for e in store.events(c.id) if e.to_state == "PENDING"] == ["admitted: within the lab's quota"]


def test_a_high_job_evicts_the_newest_low_job_past_its_minimum_run(server, store, clock):
    store.set_quota("v4", 8)
    a = queue_job(store, "a", priority="low", owner="alice")
    hosts = StopHosts()
    rec = Reconciler(store, cloud_for(server), hosts, "me", clock=clock)
    rec.sweep()
    clock.offset = 300.0
    b = queue_job(store, "b", priority="low", owner="bob")
    rec.sweep()
    assert [store.get(j.id).state for j in (a, b)] == ["RUNNING", "RUNNING"]

    clock.offset = 400.0
    h = queue_job(store, "h", priority="high", owner="carol")
    rec.sweep()  # both have run under the minimum run time (600 s): nobody is evicted yet
    assert (store.get(h.id).state, hosts.stopped) == ("QUEUED", [])
    assert store.get(h.id).waiting_for == ("quota: 8/8 v4 chips held by alice 4, bob 4; 1st in band high")

    clock.offset = 1000.0  # a has run 1000 s, b 700 s: b, the newest, goes
    report = rec.sweep()
    assert report.evicted == 1
    # b, the low job started last, got the checkpoint signal; its slice is freed, it waits again,
    # and h runs in the same sweep.
    assert hosts.stopped == [b.id]
    evicted = store.get(b.id)
    assert (evicted.state, evicted.evictions, evicted.preemptions, evicted.failures) == ("QUEUED", 1, 0, 0)
    assert store.current_attempt(b.id).end_reason == "evicted"
    assert [e.message for e in store.events(b.id) if e.to_state == "QUEUED"][-1] == (
        f"evicted: its chips go to job {h.id} (high band)")
    assert (store.get(h.id).state, store.get(a.id).state) == ("RUNNING", "RUNNING")
    assert evicted.waiting_for is None or "bob" not in evicted.waiting_for
    rec.sweep()
    assert store.get(b.id).waiting_for == "quota: 8/8 v4 chips held by alice 4, carol 4; 1st in band low"

    # Once h is done, b is admitted again and goes on in a new attempt.
    store.transition(h.id, State.RUNNING, State.DELETED, "deleted by test")
    rec.sweep()
    again = store.get(b.id)
    assert (again.state, again.attempt) == ("RUNNING", 2)


def test_an_admission_rechecks_the_quota_in_its_transaction(lab_url):
    """A sweep carrying out a plan made before another sweep's admission: the store's re-check
    sees the chips now held and leaves the job QUEUED."""
    from tpujob.reconcile.scheduling import caps_of, fits_for

    store = open_store(lab_url)
    store.set_quota("v4", 4)
    a, b = queue_job(store, "a", owner="alice"), queue_job(store, "b", owner="bob")
    caps = caps_of(store.quotas())
    stale = fits_for(store.get(b.id), caps, store.clock())  # planned while nothing was held
    assert store.admit(a.id, State.PENDING, "admitted by the other sweep", fits_for(a, caps, store.clock()))
    assert store.admit(b.id, State.PENDING, "admitted", stale) is None
    assert store.get(b.id).state == "QUEUED"
    # And the same job admitted twice: the second compare-and-set loses.
    assert store.admit(a.id, State.PENDING, "again", lambda holding: True) is None


def test_two_nodes_sweeping_one_store_never_admit_past_the_quota(server, tmp_path, lab_url):
    url = lab_url
    store = open_store(url)
    store.set_quota("v4", 20)  # five v4-8
    store.set_weight("dave", 2.0)
    jobs = [queue_job(store, f"j{i}", owner=("alice", "bob", "carol", "dave")[i % 4]) for i in range(16)]
    start = tmp_path / "go"
    nodes = [subprocess.Popen([sys.executable, str(HERE.parent / "lab_sweeper.py"), url, server.url, str(start),
                               f"node{n}", "3"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in (1, 2)]
    start.touch()
    outputs = [node.communicate(timeout=240)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    states = [store.get(j.id).state for j in jobs]
    assert states.count("RUNNING") == 5 and states.count("QUEUED") == 11, (states, outputs)
    # One winner per move: each admitted job admitted once, one node each, none for the others.
    for job in jobs:
        admitted = [e for e in store.events(job.id) if e.to_state == "PENDING"]
        assert len(admitted) == (store.get(job.id).state == "RUNNING")
    assert len(server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/us-central2-b")) == 5
    # Both nodes admitted (the work was shared) or one took all: either way, within the quota.
    assert sum(int(line.split("admitted ")[1].split(",")[0]) for out in outputs
               for line in out.splitlines() if "admitted " in line) == 5


def test_a_cost_cap_stops_the_job_with_a_checkpoint_and_starts_no_other_attempt(server, store, clock):
    store.set_quota("v4", 64)
    # A v4-8 on spot: $3.86 an hour (tpujob/catalogue.py).
    capped = queue_job(store, "capped", owner="alice",
                       extra="max_cost: 2.5\nnotify: [{webhook: 'http://127.0.0.1:9/hook'}]\n")
    bobs, later = queue_job(store, "bobs", owner="bob"), queue_job(store, "later", owner="bob")
    store.set_budget("bob", 5.0, "day")
    hosts = StopHosts()
    rec = Reconciler(store, cloud_for(server), hosts, "me", clock=clock)
    rec.sweep()
    # Deleted at once; its few seconds count for bob.
    with store.atomic():
        store.end_attempt(later.id, 1, AttemptEnd.DELETED)
        store.transition(later.id, State.RUNNING, State.DELETED, "deleted by test")
    later_node = store.current_attempt(later.id).slice_name
    rec.sweep()
    assert [store.get(j.id).state for j in (capped, bobs)] == ["RUNNING", "RUNNING"]
    assert later_node not in str(server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/us-central2-b"))

    clock.offset = 40 * 60.0  # capped: $2.58; bob's one job running 40 min: $2.58 (later: a few seconds)
    rec.sweep()
    stopped = store.get(capped.id)
    assert (stopped.state, stopped.end_reason) == ("FAILED", "budget")
    assert store.current_attempt(capped.id).end_reason == "budget"
    assert hosts.stopped == [capped.id]  # the checkpoint signal, then its grace
    (failed,) = [e.message for e in store.events(capped.id) if e.to_state == "FAILED"]
    assert failed.startswith("max_cost reached: $2.5") and failed.endswith(" of $2.50 (budget)")
    # Notified with the move (its notify channel asks for failures by default).
    from tpujob.store.outbox import Outboxes

    (note,) = Outboxes(store.engine).rows(capped.id)
    assert (note.kind, note.text) == ("failed", f"tpujob: job {capped.id:06d} 'capped' FAILED: {failed}")
    assert store.get(bobs.id).state == "RUNNING"

    clock.offset = 80 * 60.0  # bob: $5.15 today
    queued = queue_job(store, "queued", owner="bob")
    rec.sweep()
    assert (store.get(bobs.id).state, store.get(bobs.id).end_reason) == ("FAILED", "budget")
    waiting = store.get(queued.id)
    assert waiting.state == "QUEUED" and waiting.waiting_for.startswith("budget of bob reached: $5.")
    assert store.current_attempt(queued.id) is None
    rec.sweep()  # never another attempt
    assert (store.get(capped.id).attempt, store.get(bobs.id).attempt) == (1, 1)
    assert len(server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/us-central2-b")) == 0


def test_the_queue_estimates_a_start_from_the_running_jobs_progress(server, store, clock):
    from tpujob.service import quotas

    store.set_quota("v4", 4)
    running_job, waiting = queue_job(store, "a", owner="alice"), queue_job(store, "b", owner="bob")
    Reconciler(store, cloud_for(server), Hosts(), "me", clock=clock).sweep()
    assert (store.get(running_job.id).state, store.get(waiting.id).state) == ("RUNNING", "QUEUED")
    now = store.clock()
    # 100 steps in 100 s, 900 left of 1,000: about 900 s.
    store.record_steps(running_job.id, 1, last_step=0, total_steps=1000, at=now - 100)
    store.record_steps(running_job.id, 1, last_step=100, at=now)

    (row,) = quotas.queue(SimpleNamespace(store=store))  # type: ignore[arg-type]  # the one part of a Context it reads
    assert row.job.id == waiting.id and row.starts_in == pytest.approx(900, abs=5)


def test_a_store_refusing_admission_is_reported_and_the_other_jobs_go_on(server, store, monkeypatch):
    from sqlalchemy.exc import OperationalError

    import tpujob.reconcile.reconciler as reconciler_module

    store.set_quota("v4", 8)
    queued = queue_job(store, "queued")
    text = spec(name="before")  # recorded before the lab had a quota: PENDING
    parsed, lines = spec_mod.parse(text)
    resolved = spec_mod.resolve(parsed, lines, default_project=PROJECT)
    before = store.add_job(name="before", spec_yaml=text, spec_json=json.dumps(resolved.to_json_dict()),
                           accelerator=resolved.accelerator, zone=resolved.zone, project=PROJECT, cloud="local")

    def locked(*args, **kwargs):
        raise OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))

    monkeypatch.setattr(reconciler_module, "admit_queued", locked)
    report = Reconciler(store, cloud_for(server), Hosts(), "me").sweep()
    assert report.errors == ["admission: OperationalError: (builtins.Exception) database is locked"]
    assert (store.get(before.id).state, store.get(queued.id).state) == ("RUNNING", "QUEUED")


@pytest.mark.parametrize("ended, holds", [(AttemptEnd.CANCELLED, True), (AttemptEnd.EVICTED, False),
                                          (AttemptEnd.PREEMPTED, False)])
def test_a_cancelled_job_holds_chips_only_while_it_keeps_its_slice(store, ended, holds):
    """`cancel` of a running job keeps its slice (for `resume`); of one whose attempt had already
    ended (evicted, preempted), there is no slice left to hold the quota."""
    job = queue_job(store, "c")
    store.transition(job.id, State.QUEUED, State.PENDING, "admitted by test")
    store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "test", zone=job.zone,
                        accelerator=job.accelerator, queued=False)
    with store.atomic():
        store.end_attempt(job.id, 1, ended)
        store.transition(job.id, State.PROVISIONING, State.CANCELLED, "cancelled by test")
    assert (job.id in [j.id for j in store.holding_jobs()]) == holds
