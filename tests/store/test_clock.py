"""The store's clock and leases: every timestamp comes from `Store(engine, clock=...)`, so time
is pinned here instead of slept through; `store.lease()` holds a job for a block."""

from __future__ import annotations

import pytest
from spec_texts import STORED

from tpujob.errors import IllegalTransition, JobLocked
from tpujob.store.repository import Store, open_store
from tpujob.store.states import EndReason, State


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return open_store(f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.db'}").engine


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(engine, clock) -> Store:
    return Store(engine, clock=clock)


def _add(store: Store, name: str = "demo"):
    return store.add_job(name=name, spec_yaml="name: demo\n", spec_json=STORED, accelerator="v4-8",
                         zone="us-central2-b", project="p", cloud="local")


def _events_at(store: Store, job_id: int) -> list[tuple[str, float]]:
    return [(e.kind, e.at) for e in store.events(job_id)]


def test_open_store_passes_the_clock_on(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", clock=FakeClock(42.0))
    job = _add(store)
    assert (job.created_at, job.updated_at, job.state_since) == (42.0, 42.0, 42.0)


def test_every_timestamp_comes_from_the_clock(store, clock):
    job = _add(store)
    assert (job.created_at, job.updated_at, job.state_since, job.ended_at) == (1000.0, 1000.0, 1000.0, None)
    clock.now = 1010.0
    job, attempt = store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                                       accelerator="v4-8", queued=False)
    assert (job.state_since, job.updated_at, attempt.started_at) == (1010.0, 1010.0, 1010.0)
    clock.now = 1025.5
    job = store.transition(job.id, State.PROVISIONING, State.FAILED, "gave up", end_reason=EndReason.NO_CAPACITY)
    assert (job.state_since, job.ended_at) == (1025.5, 1025.5)
    clock.now = 1030.0
    store.end_attempt(job.id, 1, "no_capacity")
    store.add_event(job.id, "note", "hello")
    assert store.attempts(job.id)[0].ended_at == 1030.0
    assert _events_at(store, job.id) == [("created", 1000.0), ("attempt", 1010.0), ("state", 1010.0),
                                         ("state", 1025.5), ("note", 1030.0)]


def test_running_seconds_add_up_every_stretch_in_running(store, clock):
    job = _add(store)
    store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")
    clock.now = 1100.0
    store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")
    clock.now = 1400.0
    job = store.transition(job.id, State.RUNNING, State.RECOVERING, "preempted")
    assert job.running_seconds == 300.0
    clock.now = 1500.0  # time out of RUNNING does not count
    store.start_attempt(job.id, State.RECOVERING, State.SETTING_UP, "again", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")
    clock.now = 1620.0
    job = store.transition(job.id, State.RUNNING, State.SUCCEEDED, "done")
    assert (job.running_seconds, job.ended_at) == (420.0, 1620.0)


def test_a_lease_expires_on_the_clock(store, clock):
    job_id = _add(store).id
    store.acquire_lease(job_id, "crashed", ttl_seconds=60)
    clock.now = 1059.0
    with pytest.raises(JobLocked, match="locked by crashed for 1 s more"):
        store.acquire_lease(job_id, "sweep-b", ttl_seconds=60)
    clock.now = 1060.0
    job = store.acquire_lease(job_id, "sweep-b", ttl_seconds=60)
    assert (job.lease_owner, job.lease_expires) == ("sweep-b", 1120.0)
    assert store.get(job_id).lease_expires == 1120.0


def test_a_transition_under_a_lease_needs_the_live_lease(store, clock):
    job_id = _add(store).id
    store.acquire_lease(job_id, "a", ttl_seconds=60)
    with pytest.raises(JobLocked):
        store.transition(job_id, State.PENDING, State.PROVISIONING, "go", owner="b")
    clock.now = 1060.0
    with pytest.raises(JobLocked, match="no longer leased to a"):
        store.transition(job_id, State.PENDING, State.PROVISIONING, "go", owner="a")
    with pytest.raises(IllegalTransition):  # start_attempt names no holder, only the lost race
        store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                            accelerator="v4-8", queued=False, owner="a")
    assert store.get(job_id).state == "PENDING" and [e.kind for e in store.events(job_id)] == ["created"]
    store.acquire_lease(job_id, "a", ttl_seconds=60)
    assert store.transition(job_id, State.PENDING, State.PROVISIONING, "go", owner="a").state == "PROVISIONING"


def test_lease_holds_the_job_for_the_block_and_releases_it(store, clock):
    job_id = _add(store).id
    with store.lease(job_id, "sweep-a", ttl_seconds=30) as job:
        assert (job.id, job.lease_owner, job.lease_expires) == (job_id, "sweep-a", 1030.0)
        with pytest.raises(JobLocked, match="locked by sweep-a"):
            with store.lease(job_id, "sweep-b", ttl_seconds=30):
                pass
        assert store.get(job_id).lease_owner == "sweep-a"  # the refused one released nothing
    assert (store.get(job_id).lease_owner, store.get(job_id).lease_expires) == (None, None)


def test_lease_is_released_when_the_block_raises(store):
    job_id = _add(store).id
    with pytest.raises(RuntimeError):
        with store.lease(job_id, "sweep-a", ttl_seconds=30):
            raise RuntimeError("act failed")
    assert store.get(job_id).lease_owner is None
    with store.lease(job_id, "sweep-b", ttl_seconds=30) as job:
        assert job.lease_owner == "sweep-b"


def test_a_lab_node_registers_once_and_is_seen_again(store, clock):
    # Each node registers its public key on every sweep and create (Store.register_node): one row a
    # key, its first registration kept, its last sighting and name brought up to date.
    store.register_node("ssh-ed25519 AAAA-b tpujob", "b:/home/b/.tpujob")
    clock.now = 1100.0
    store.register_node("ssh-ed25519 AAAA-a tpujob", "a:/home/a/.tpujob")
    clock.now = 1200.0
    store.register_node("ssh-ed25519 AAAA-b tpujob", "b2:/home/b/.tpujob")
    nodes = [(n.public_key, n.name, n.registered_at, n.last_seen) for n in store.lab_nodes()]
    assert nodes == [("ssh-ed25519 AAAA-b tpujob", "b2:/home/b/.tpujob", 1000.0, 1200.0),
                     ("ssh-ed25519 AAAA-a tpujob", "a:/home/a/.tpujob", 1100.0, 1100.0)]
