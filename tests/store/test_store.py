"""The store: every legal and illegal transition, compare-and-set under concurrent writers,
leases and their expiry, attempts and events."""

from __future__ import annotations

import re
import time
from collections import deque

import pytest
from races import contest, run_racers
from spec_texts import STORED

from tpujob.errors import EXIT_CONFLICT, EXIT_NOT_FOUND, IllegalTransition, JobLocked, NotFoundError
from tpujob.names import SLICE_NAME, format_job_id, slice_name, store_tag
from tpujob.store.identity import store_id
from tpujob.store.repository import Store, open_store
from tpujob.store.states import ACTIVE, ENDED, TRANSITIONS, EndReason, State

PAIRS = [(src, dst) for src in State for dst in State]
LEGAL = [(s, d) for s, d in PAIRS if d in TRANSITIONS[s]]
ILLEGAL = [(s, d) for s, d in PAIRS if d not in TRANSITIONS[s]]


def _url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


BACKENDS = ["sqlite", "postgresql"]


def _blank_url(backend: str, tmp_path, request) -> str:
    """A blank store: a SQLite file, or a fresh database on the session's PostgreSQL server."""
    if backend == "sqlite":
        return _url(tmp_path)
    return request.getfixturevalue("postgres_cluster").new_database()


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory) -> Store:
    """One store per backend for the module (opening and migrating one per test costs more than
    the test); every test works on jobs of its own."""
    return open_store(_blank_url(request.param, tmp_path_factory.mktemp("store"), request))


@pytest.fixture(params=BACKENDS)
def fresh_store(request, tmp_path) -> Store:
    return open_store(_blank_url(request.param, tmp_path, request))


def _add(store: Store, name: str = "demo"):
    return store.add_job(name=name, spec_yaml="name: demo\n", spec_json=STORED, accelerator="v4-8",
                         zone="us-central2-b", project="p", cloud="local")


def _path_to(target: State) -> list[State]:
    """The shortest chain of legal moves from PENDING to `target` (breadth-first)."""
    previous = {State.PENDING: None}
    queue = deque([State.PENDING])
    while queue:
        state = queue.popleft()
        for nxt in sorted(TRANSITIONS[state], key=lambda s: s.value):
            if nxt not in previous:
                previous[nxt] = state
                queue.append(nxt)
    assert target in previous, f"{target} cannot be reached from PENDING"
    chain = [target]
    while previous[chain[-1]] is not None:
        chain.append(previous[chain[-1]])
    return chain[::-1]


def _move(store: Store, job_id: int, src: State, dst: State, **kwargs):
    reason = EndReason.INTERNAL if dst == State.FAILED else None
    return store.transition(job_id, src, dst, f"{src.value} -> {dst.value}", end_reason=reason, **kwargs)


def _job_in(store: Store, state: State) -> int:
    job_id = _add(store).id
    chain = _path_to(state)
    for src, dst in zip(chain, chain[1:]):
        _move(store, job_id, src, dst)
    assert store.get(job_id).state == state.value
    return job_id


def _snapshot(store: Store, job_id: int):
    job = store.get(job_id)
    events = [(e.id, e.kind, e.from_state, e.to_state, e.message) for e in store.events(job_id)]
    return job.state, job.end_reason, job.updated_at, events


def test_the_table_names_exactly_the_issue_states():
    assert [s.value for s in State] == ["QUEUED", "PENDING", "PROVISIONING", "SETTING_UP", "RUNNING", "RECOVERING",
                                        "SUCCEEDED", "FAILED", "CANCELLED", "DELETED"]
    assert set(TRANSITIONS) == set(State)
    assert {r.value for r in EndReason} == {"user_error", "setup_failed", "no_capacity", "preemption_budget",
                                            "nan_budget", "bad_host_budget", "internal", "ssh_refused", "hang_budget",
                                            "budget"}
    assert ENDED | ACTIVE == set(State) and not ENDED & ACTIVE


def test_a_successful_job_is_never_re_run():
    assert TRANSITIONS[State.SUCCEEDED] == {State.DELETED}
    assert TRANSITIONS[State.DELETED] == frozenset()


@pytest.mark.parametrize("src, dst", LEGAL, ids=[f"{s.value}->{d.value}" for s, d in LEGAL])
def test_legal_transition(store, src, dst):
    job_id = _job_in(store, src)
    before = store.events(job_id)
    job = _move(store, job_id, src, dst)
    assert job.state == dst.value
    assert store.get(job_id).state == dst.value
    after = store.events(job_id)
    assert len(after) == len(before) + 1
    event = after[-1]
    assert (event.kind, event.from_state, event.to_state) == ("state", src.value, dst.value)
    if dst == State.FAILED:
        assert job.end_reason == "internal" and "(internal)" in event.message
    else:
        assert job.end_reason is None
    assert (job.ended_at is not None) == (dst in ENDED)


@pytest.mark.parametrize("src, dst", ILLEGAL, ids=[f"{s.value}->{d.value}" for s, d in ILLEGAL])
def test_illegal_transition(store, src, dst):
    job_id = _job_in(store, src)
    before = _snapshot(store, job_id)
    with pytest.raises(IllegalTransition) as info:
        _move(store, job_id, src, dst)
    assert info.value.exit_code == EXIT_CONFLICT
    assert f"{src.value} -> {dst.value}" in info.value.message
    assert _snapshot(store, job_id) == before


def test_compare_and_set_refuses_a_stale_source_state(store):
    job_id = _job_in(store, State.RUNNING)
    before = _snapshot(store, job_id)
    # PENDING -> PROVISIONING is legal in the table, but the job is no longer PENDING.
    with pytest.raises(IllegalTransition, match="is RUNNING, not PENDING"):
        _move(store, job_id, State.PENDING, State.PROVISIONING)
    assert _snapshot(store, job_id) == before


def test_failed_needs_a_reason_and_keeps_it(store):
    job_id = _job_in(store, State.RUNNING)
    before = _snapshot(store, job_id)
    with pytest.raises(ValueError):
        store.transition(job_id, State.RUNNING, State.FAILED, "boom")
    assert _snapshot(store, job_id) == before
    job = store.transition(job_id, State.RUNNING, State.FAILED, "budget spent",
                           end_reason=EndReason.PREEMPTION_BUDGET)
    assert (job.state, job.end_reason) == ("FAILED", "preemption_budget")
    assert job.ended_at is not None


def test_resuming_a_failed_job_clears_its_end(store):
    job_id = _job_in(store, State.FAILED)
    job = _move(store, job_id, State.FAILED, State.RECOVERING)
    assert (job.end_reason, job.ended_at) == (None, None)


def test_transition_of_a_missing_job(store):
    with pytest.raises(NotFoundError) as info:
        _move(store, 999999, State.PENDING, State.PROVISIONING)
    assert info.value.exit_code == EXIT_NOT_FOUND


# --- leases -------------------------------------------------------------------------------------

def test_a_second_owner_is_locked_out(store):
    job_id = _add(store).id
    store.acquire_lease(job_id, "sweep-a", ttl_seconds=60)
    with pytest.raises(JobLocked) as info:
        store.acquire_lease(job_id, "sweep-b", ttl_seconds=60)
    assert info.value.exit_code == EXIT_CONFLICT
    assert "sweep-a" in info.value.message
    store.acquire_lease(job_id, "sweep-a", ttl_seconds=60)  # the holder renews
    assert store.get(job_id).lease_owner == "sweep-a"


def test_release_frees_the_lease_for_its_owner_only(store):
    job_id = _add(store).id
    store.acquire_lease(job_id, "a", ttl_seconds=60)
    store.release_lease(job_id, "b")
    with pytest.raises(JobLocked):
        store.acquire_lease(job_id, "b", ttl_seconds=60)
    store.release_lease(job_id, "a")
    store.acquire_lease(job_id, "b", ttl_seconds=60)


def test_a_kept_lease_outlives_its_ttl_while_held_and_is_free_after(store):
    """keep_alive renews the lease from a thread for as long as the block runs (a setup of many
    minutes), while its TTL stays what a dead holder keeps the job for."""
    job_id = _add(store).id
    ttl = 1.5  # renewed every quarter of it: a loaded machine's stall of a few tenths is fine
    with store.lease(job_id, "sweep-a", ttl, keep_alive=True):
        first = store.get(job_id).lease_expires
        # Until the lease, renewed, runs two TTLs past its first expiry (the row says so: no
        # clock here), another sweep is refused every time it asks.
        deadline = time.monotonic() + 120  # bounds a hang only
        while store.get(job_id).lease_expires < first + 2 * ttl:
            assert time.monotonic() < deadline, "the lease was never renewed"
            with pytest.raises(JobLocked):
                store.acquire_lease(job_id, "sweep-b", ttl_seconds=60)
            time.sleep(0.1)
    assert store.get(job_id).lease_owner is None
    store.acquire_lease(job_id, "sweep-b", ttl_seconds=60)
    store.release_lease(job_id, "sweep-b")


def test_an_unkept_lease_lapses_after_its_ttl(store):
    """What a sweep that died leaves behind: the lease is free once its TTL has passed."""
    job_id = _add(store).id
    store.acquire_lease(job_id, "dead-sweep", ttl_seconds=0.3)
    time.sleep(0.5)
    store.acquire_lease(job_id, "next-sweep", ttl_seconds=60)
    store.release_lease(job_id, "next-sweep")


def test_lease_of_a_missing_job(store):
    with pytest.raises(NotFoundError):
        store.acquire_lease(999999, "a", ttl_seconds=60)


def test_context_lease_waits_then_gives_up(tmp_path, monkeypatch):
    from tpujob.service.context import Context
    from tpujob.settings import Settings

    monkeypatch.setenv("TPUJOB_DB_URL", _url(tmp_path))
    ctx = Context(Settings(db_url=_url(tmp_path)))
    job_id = _add(ctx.store).id
    # Held past the test's own timeout: a lease that waited for it would not end in JobLocked.
    ctx.store.acquire_lease(job_id, "someone-else", ttl_seconds=3600)
    start = time.monotonic()
    with pytest.raises(JobLocked):
        with ctx.lease(job_id, wait_seconds=0.3):
            pass
    assert time.monotonic() - start >= 0.25  # it waited (a lower bound: load cannot fail it)
    ctx.store.release_lease(job_id, "someone-else")
    with ctx.lease(job_id) as owner:
        assert ctx.store.get(job_id).lease_owner == owner == ctx.actor
    assert ctx.store.get(job_id).lease_owner is None
    with pytest.raises(RuntimeError):  # a command that fails under the lease still frees the job
        with ctx.lease(job_id):
            raise RuntimeError("cloud call failed")
    assert ctx.store.get(job_id).lease_owner is None


# --- compare-and-set under concurrent writers (processes on one SQLite file) --------------------

CHAIN = [State.PENDING, State.PROVISIONING, State.SETTING_UP, State.RUNNING, State.RECOVERING,
         State.PROVISIONING]


def _racer(url: str, name: str, job_ids: list[int], barrier, results) -> None:
    """Race the other process through CHAIN for every job; report what this one won."""
    store = open_store(url)
    won, lease_won, errors = [], [], []
    for job_id in job_ids:
        for src, dst in zip(CHAIN, CHAIN[1:]):
            barrier.wait()
            if contest(errors, IllegalTransition, store.transition, job_id, src, dst,
                       f"{name}: {src.value} -> {dst.value}"):
                won.append((job_id, dst.value))
        barrier.wait()
        if contest(errors, JobLocked, store.acquire_lease, job_id, name, ttl_seconds=60):
            lease_won.append(job_id)
    results.put((name, won, lease_won, errors))


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_writers_one_winner_per_race(backend, tmp_path, request):
    url = _blank_url(backend, tmp_path, request)
    store = open_store(url)
    job_ids = [_add(store, f"job-{i}").id for i in range(15)]
    reports = run_racers(_racer, [(url, name, job_ids) for name in ("w1", "w2")], barrier_timeout=60,
                         report_timeout=90)
    errors = [e for _, _, _, errs in reports for e in errs]
    assert errors == []
    wins = sorted(w for _, won, _, _ in reports for w in won)
    expected = sorted((j, dst.value) for j in job_ids for dst in CHAIN[1:])
    assert wins == expected  # every step of every job won exactly once
    leases = sorted(j for _, _, lease_won, _ in reports for j in lease_won)
    assert leases == job_ids
    # Both writers really raced: each won some steps.
    assert all(won for _, won, _, _ in reports)
    for job_id in job_ids:
        assert store.get(job_id).state == CHAIN[-1].value
        events = store.events(job_id)
        assert [e.kind for e in events] == ["created"] + ["state"] * (len(CHAIN) - 1)
        assert [e.to_state for e in events[1:]] == [s.value for s in CHAIN[1:]]


# --- attempts, events, lookup -------------------------------------------------------------------

def test_ids_and_slice_names_are_short_and_derived():
    assert format_job_id(42) == "000042"
    assert store_tag("3f9a0c5e" * 4) == "3f9a0c"
    assert slice_name(42, 3, "3f9a0c") == "tpujob-3f9a0c-000042-3"
    assert slice_name(42, 3, "3f9a0c") == slice_name(42, 3, "3f9a0c")
    assert SLICE_NAME.match("tpujob-3f9a0c-000042-3").group("store", "job") == ("3f9a0c", "000042")


def test_slice_names_stay_within_googles_names():
    """Compute Engine names (instances, templates, MIGs, policies) are RFC 1035, at most 63
    characters (tpujob/names.py cites the rule); a MIG's VMs add `-xxxx`, a multislice node `-K`."""
    rfc1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    longest = slice_name(10**9, 10**4, "f" * 6) + "-99" + "-abcd"
    assert rfc1035.match(longest) and len(longest) <= 63


def test_two_stores_name_their_job_1_apart(tmp_path):
    """Two stores in one project each have a job 1: its slices must not share a name, or the
    second would adopt the first's through the already-exists path."""
    names = []
    for home in ("a", "b"):
        store = open_store(f"sqlite:///{tmp_path / home}.db")
        job = _add(store)
        assert job.id == 1
        _, attempt = store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                                         accelerator="v4-8", queued=False)
        assert attempt.slice_name == slice_name(1, 1, store.store_tag)
        assert store.store_tag == store_id(store.engine)[:6]
        names.append(attempt.slice_name)
    assert names[0] != names[1]


def test_attempts_are_numbered_and_recorded(store):
    job_id = _add(store).id
    _, first = store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                                   accelerator="v4-8", queued=True)
    store.end_attempt(job_id, 1, "preempted", last_step=120)
    store.transition(job_id, State.PROVISIONING, State.RECOVERING, "lost")
    job, second = store.start_attempt(job_id, State.RECOVERING, State.PROVISIONING, "again", zone="us-central2-a",
                                      accelerator="v4-8", queued=True)
    assert (first.number, second.number) == (1, 2)
    assert job.state == "PROVISIONING"
    assert second.slice_name == slice_name(job_id, 2, store.store_tag)
    job = store.get(job_id)
    assert (job.attempt, job.zone) == (2, "us-central2-a")
    attempts = store.attempts(job_id)
    assert [(a.number, a.end_reason, a.last_step) for a in attempts] == [(1, "preempted", 120), (2, None, None)]
    assert attempts[0].ended_at is not None
    assert [e.kind for e in store.events(job_id)] == ["created", "attempt", "state", "state", "attempt", "state"]


def test_start_attempt_is_a_compare_and_set(store):
    job_id = _add(store).id
    store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=True)
    with pytest.raises(IllegalTransition):  # a second actor with the same stale view opens nothing
        store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                            accelerator="v4-8", queued=True)
    assert [a.number for a in store.attempts(job_id)] == [1]


def test_end_attempt_is_idempotent(store):
    job_id = _add(store).id
    store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    store.end_attempt(job_id, 1, "preempted", last_step=5)
    store.end_attempt(job_id, 1, "internal", last_step=9)
    assert (store.attempts(job_id)[0].end_reason, store.attempts(job_id)[0].last_step) == ("preempted", 5)


def test_find_by_id_or_newest_name(store):
    a = _add(store, "train")
    b = _add(store, "train")
    assert store.find(str(a.id)).id == a.id
    assert store.find(format_job_id(a.id)).id == a.id
    assert store.find("train").id == b.id
    with pytest.raises(NotFoundError):
        store.find("nope")
    with pytest.raises(NotFoundError):
        store.find("999999")


def test_list_hides_ended_jobs_unless_asked(fresh_store):
    live = _add(fresh_store, "live").id
    done = _job_in(fresh_store, State.SUCCEEDED)
    assert [j.id for j in fresh_store.list_jobs()] == [live]
    assert [j.id for j in fresh_store.list_jobs(include_ended=True)] == [live, done]
    assert [j.id for j in fresh_store.list_jobs(states=[State.SUCCEEDED])] == [done]


def test_remove_forgets_job_attempts_and_events(store):
    job_id = _add(store).id
    store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=True)
    store.add_event(job_id, "note", "hello")
    store.remove(job_id)
    with pytest.raises(NotFoundError):
        store.get(job_id)
    assert store.attempts(job_id) == [] and store.events(job_id) == []


def test_a_read_does_not_wait_for_another_process_writing(tmp_path):
    """`show` or the dashboard reads while a sweep holds SQLite's write lock: the read sees the
    last committed state at once (WAL snapshot) instead of queueing on the busy timeout (30 s)."""
    import sqlite3

    store = open_store(_url(tmp_path))
    job = _add(store)
    writer = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE job SET name = 'renamed' WHERE id = ?", (job.id,))
        seen = (store.get(job.id).name, store.find("demo").id, [j.id for j in store.list_jobs()],
                store.current_attempt(job.id), store.attempts(job.id), len(store.events(job.id)))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    # The writer lets go only after the reads: a read queued behind it would have failed with
    # "database is locked" at the busy timeout instead of seeing the last committed state.
    assert seen == ("demo", job.id, [job.id], None, [], 1)


def test_the_counters_are_the_jobs_columns_and_the_budgets():
    """store/states.COUNTERS, the one list of a job's counters, names Job columns and JobView
    fields; every budget counts one of them; flaps and evictions (the lab's scheduler's, never
    a failure) are the ones without a budget."""
    import dataclasses

    from tpujob.reconcile.budgets import BUDGETS
    from tpujob.reconcile.observation import JobView
    from tpujob.store.models import Job
    from tpujob.store.states import COUNTERS

    assert set(COUNTERS) <= set(Job.model_fields)
    assert set(COUNTERS) <= {f.name for f in dataclasses.fields(JobView)}
    assert set(COUNTERS) - set(BUDGETS) == {"flaps", "evictions"}


def test_an_error_line_names_the_error_and_hides_the_stores_password():
    # What a sweep reports when the store refuses a write (a lease, when the slices were seen):
    # the driver's first line, which may quote the URL and its password.
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    url = "postgresql+psycopg://lab:s3cret@127.0.0.1:1/tpujob"
    store = Store(create_engine(url))  # no connection is made
    refused = OperationalError("BEGIN", {}, Exception(f"connection to {url} failed: password s3cret refused\nmore"))
    line = store.error_line(refused)
    assert line.startswith("OperationalError: (builtins.Exception) connection to postgresql+psycopg://lab:")
    assert "s3cret" not in line and "***" in line and "more" not in line, line


def test_a_full_disk_says_disk_full(cli, tpujob_home):
    """Issue 45: a store that cannot be written for want of room said "cannot reach store".
    /dev/full answers every write with ENOSPC, which SQLite reports as SQLITE_FULL."""
    tpujob_home.mkdir(parents=True, exist_ok=True)
    (tpujob_home / "tpujob.db").symlink_to("/dev/full")
    result = cli("show", "1")
    assert result.code == 6
    assert result.error_line.startswith(f"error: disk full: cannot write the store 'sqlite:///{tpujob_home}/tpujob.db'")
