"""The sweep's act phase against an in-process emulator, hosts stubbed: jobs are acted on in
parallel (each under its own lease, errors kept per job), and a preempted job is set up again
in the sweep that sees the preemption unless its attempt flapped."""

from __future__ import annotations

import threading
import time

import pytest
from test_sweep import PROJECT, Z1, Hosts, add_job, cloud_for, events

from tpujob.names import slice_name
from tpujob.reconcile.reconciler import Reconciler


class MeetingHosts(Hosts):
    """Each launch waits until `parties` launches are under way at once: serial acts never get
    there (the first one times out), parallel ones all do."""

    def __init__(self, parties: int, timeout: float = 10, **kwargs):
        super().__init__(**kwargs)
        self.meeting = threading.Barrier(parties, timeout=timeout)
        self.lock = threading.Lock()
        self.under_way, self.most = 0, 0

    def start_setup(self, job, attempt, slice_):
        with self.lock:
            self.under_way += 1
            self.most = max(self.most, self.under_way)
        try:
            if job.id not in self.fail_for:
                self.meeting.wait()
            return super().start_setup(job, attempt, slice_)
        finally:
            with self.lock:
                self.under_way -= 1


def spec(name="par", requeue=""):
    extra = f", {requeue}" if requeue else ""
    return (f"name: {name}\ntpu: {{accelerator: v4-8, zone: {Z1}, queued: false}}\n"
            f"requeue: {{max_preemptions: 5{extra}}}\nrun: {{command: train}}\n")


def test_jobs_are_set_up_at_once_each_under_its_own_lease(server, store):
    jobs = [add_job(store, spec(name=f"j{i}")) for i in range(5)]
    hosts = MeetingHosts(parties=5)
    rec = Reconciler(store, cloud_for(server), hosts, "me", workers=16)
    report = rec.sweep()
    assert report.errors == [] and report.jobs_acted == 5
    assert hosts.most == 5
    assert sorted(hosts.launched) == [(j.id, 1) for j in jobs]
    for job in jobs:
        stored = store.get(job.id)
        assert (stored.state, stored.attempt, stored.lease_owner) == ("RUNNING", 1, None)


def test_one_worker_acts_on_one_job_after_another(server, store):
    for i in range(2):
        add_job(store, spec(name=f"j{i}"))
    rec = Reconciler(store, cloud_for(server), MeetingHosts(parties=2, timeout=1), "me", workers=1)
    report = rec.sweep()  # the first launch waits for a second one that never comes
    assert report.jobs_acted == 2  # their nodes were asked for; neither was set up
    assert [e.split(": ", 1)[1] for e in report.errors] == ["unexpected BrokenBarrierError: "] * 2


def test_one_jobs_act_raising_is_reported_and_the_others_go_on(server, store):
    jobs = [add_job(store, spec(name=f"j{i}")) for i in range(4)]
    broken = jobs[1]
    hosts = MeetingHosts(parties=3, fail_for={broken.id})
    report = Reconciler(store, cloud_for(server), hosts, "me", workers=4).sweep()
    assert report.errors == [f"job {broken.id:06d}: unexpected RuntimeError: a bug in setup"]
    assert report.jobs_acted == 4  # each was acted on (its node asked for); the broken one is reported
    assert "error: unexpected RuntimeError: a bug in setup" in events(store, broken.id)
    for job in jobs:
        stored = store.get(job.id)
        assert stored.lease_owner is None  # released: the next sweep may try again
        assert stored.state == ("SETTING_UP" if job.id == broken.id else "RUNNING")


def preempt_all(server, store, jobs) -> None:
    for job in jobs:
        server.emulator.host_faults.preempt(store.current_attempt(job.id).slice_name)


def test_a_store_locked_past_its_busy_timeout_at_the_first_write_does_not_end_the_sweep(server, store,
                                                                                     monkeypatch):
    # The first write of a sweep records when the jobs were seen; with eight sweep processes
    # on two cores, SQLite's 30 s busy timeout once ran out there and the process ended with
    # "unexpected OperationalError" (a fresh-clone run of the suite, 2026-11-28).
    import sqlite3

    from sqlalchemy.exc import OperationalError

    def locked(*_):
        raise OperationalError("BEGIN IMMEDIATE", {}, sqlite3.OperationalError("database is locked"))

    job = add_job(store, spec())
    monkeypatch.setattr(store, "mark_observed", locked)
    report = Reconciler(store, cloud_for(server), Hosts(), "me", workers=4).sweep()
    assert report.errors == ["when the slices were seen is not recorded: OperationalError: "
                             "(sqlite3.OperationalError) database is locked"]
    assert report.jobs_acted == 1 and store.get(job.id).state == "RUNNING"


def test_a_preempted_job_runs_again_after_one_sweep(server, store):
    """The default backoff (30 s) is not waited after a preemption: the sweep that sees it
    deletes the slice, creates the next and sets it up. (min_run_seconds 0: the attempt ran only
    a moment here, which would be a flap.)"""
    jobs = [add_job(store, spec(name=f"j{i}", requeue="min_run_seconds: 0")) for i in range(3)]
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    preempt_all(server, store, jobs)
    report = rec.sweep()
    assert report.errors == []
    for job in jobs:
        stored = store.get(job.id)
        assert (stored.state, stored.attempt, stored.preemptions, stored.flaps) == ("RUNNING", 2, 1, 0)
        assert any(e.endswith("preemption 1 of 5 allowed, next attempt now") for e in events(store, job.id))
    nodes = server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/{Z1}")
    assert sorted((n["name"].rsplit("/", 1)[-1], n["state"]) for n in nodes) == \
        [(slice_name(j.id, 2, store.store_tag), "READY") for j in jobs]


def test_a_preemption_soon_after_the_start_is_a_flap_and_waits(server, store):
    job = add_job(store, spec(requeue="min_run_seconds: 600"))  # backoff_seconds: the default 30
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    preempt_all(server, store, [job])
    rec.sweep()
    stored = store.get(job.id)
    assert (stored.state, stored.attempt, stored.preemptions, stored.flaps) == ("RECOVERING", 1, 1, 1)
    said = events(store, job.id)[-1]
    assert "under min_run_seconds (600): flap 1, next attempt in 3" in said, said
    rec.sweep()  # the backoff is not over: nothing is created
    assert (store.get(job.id).state, store.get(job.id).attempt) == ("RECOVERING", 1)
    # Once it is over (the clock moved 40 s on), the next attempt starts and runs.
    later = Reconciler(store, cloud_for(server), Hosts(), "me", clock=lambda: time.time() + 40)
    later.sweep()
    stored = store.get(job.id)
    assert (stored.state, stored.attempt, stored.flaps) == ("RUNNING", 2, 1)


@pytest.mark.parametrize("value", ["0", "many", "257"])
def test_a_bad_worker_count_is_refused_before_anything_starts(cli, monkeypatch, tpujob_home, value,
                                                                no_emulator_left):
    monkeypatch.setenv("TPUJOB_SWEEP_WORKERS", value)
    result = cli("requeue")
    assert result.code == 6
    assert result.error_line == (f"error: TPUJOB_SWEEP_WORKERS must be a whole number from 1 to 256, "
                                 f"got {value!r}")
    assert not (tpujob_home / "tpujob.db").exists()


@pytest.mark.parametrize("value", ["0", "soon", "-5"])
def test_a_bad_lease_length_is_refused_before_anything_starts(cli, monkeypatch, tpujob_home, value,
                                                               no_emulator_left):
    # TPUJOB_LEASE_SECONDS was read with float(): "soon" ended the sweep with a traceback.
    monkeypatch.setenv("TPUJOB_LEASE_SECONDS", value)
    result = cli("requeue")
    assert result.code == 6
    assert result.error_line == f"error: TPUJOB_LEASE_SECONDS must be seconds from 1 to 604800, got {value!r}"
    assert not (tpujob_home / "tpujob.db").exists()
