"""The store on a real PostgreSQL server, as a lab shares one queue across login nodes: four
processes, each with its own TPUJOB_HOME and the same TPUJOB_DB_URL, race every move, lease and
attempt of the same jobs; the CLI reads and writes it; grouped transactions hold there too.
(Migrations on PostgreSQL: tests/store/test_migrations.py; every store operation: tests/store/test_store.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from races import contest, run_racers
from spec_texts import STORED
from sqlalchemy import create_engine, text

from tpujob.errors import IllegalTransition, JobLocked
from tpujob.store.states import TRANSITIONS, State

ROOT = Path(__file__).resolve().parents[2]
NODES = 4
JOBS = 12
# Every move a sweep makes over a job's life, racing: each must be won by exactly one node.
CHAIN = [State.PENDING, State.PROVISIONING, State.SETTING_UP, State.RUNNING, State.RECOVERING]


def _login_node(home: str, url: str, name: str, job_ids: list[int], barrier, results) -> None:
    """One login node: its own TPUJOB_HOME, the lab's URL, opened the way every command opens it."""
    os.environ["TPUJOB_HOME"] = home
    os.environ["TPUJOB_DB_URL"] = url
    from tpujob.service.context import Context

    store = Context.load().store
    won, leases, attempts, errors = [], [], [], []
    for job_id in job_ids:
        for src, dst in zip(CHAIN, CHAIN[1:]):
            barrier.wait()
            job = store.get(job_id)
            # A counter moves with the state, from what this node read: a lost update would
            # show as a preemption counted twice.
            extra = {"preemptions": job.preemptions + 1} if dst == State.RECOVERING else {}
            if contest(errors, IllegalTransition, store.transition, job_id, src, dst, f"{name}: {dst.value}", **extra):
                won.append((job_id, dst.value))
        barrier.wait()
        if contest(errors, IllegalTransition, store.start_attempt, job_id, State.RECOVERING, State.PROVISIONING,
                   f"{name}: next attempt", zone="us-central2-b", accelerator="v4-8", queued=False):
            attempts.append(job_id)
        barrier.wait()
        if contest(errors, JobLocked, store.acquire_lease, job_id, name, ttl_seconds=60):
            leases.append(job_id)
    results.put((name, won, attempts, leases, errors))


def test_four_login_nodes_sharing_one_postgresql_store_win_each_move_once(postgres_url, tmp_path):
    from tpujob.store.repository import open_store

    store = open_store(postgres_url)
    job_ids = [store.add_job(name=f"job-{i}", spec_yaml="name: j\n", spec_json=STORED, accelerator="v4-8",
                             zone="us-central2-b", project="p", cloud="local").id for i in range(JOBS)]
    reports = run_racers(_login_node, [(str(tmp_path / f"node{n}"), postgres_url, f"node{n}", job_ids)
                                       for n in range(NODES)], barrier_timeout=120, report_timeout=240)
    assert [e for *_, errors in reports for e in errors] == []
    wins = sorted(w for _, won, *_ in reports for w in won)
    assert wins == sorted((j, dst.value) for j in job_ids for dst in CHAIN[1:])
    assert sorted(j for _, _, attempts, _, _ in reports for j in attempts) == job_ids
    assert sorted(j for _, _, _, leases, _ in reports for j in leases) == job_ids
    assert sum(1 for _, won, *_ in reports if won) > 1  # the nodes really raced
    for job_id in job_ids:
        job = store.get(job_id)
        assert (job.state, job.preemptions, job.attempt) == ("PROVISIONING", 1, 1)
        assert [a.number for a in store.attempts(job_id)] == [1]
        moves = [(e.from_state, e.to_state) for e in store.events(job_id) if e.to_state]
        assert all(State(dst) in TRANSITIONS[State(src)] for src, dst in moves[1:])
        assert [dst for _, dst in moves] == [s.value for s in CHAIN] + ["PROVISIONING"]


def test_a_block_that_raises_leaves_nothing_on_postgresql(postgres_url):
    from tpujob.store.repository import open_store

    store = open_store(postgres_url)
    job = store.add_job(name="j", spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="z", project="p",
                        cloud="local")
    other = create_engine(postgres_url)
    with pytest.raises(RuntimeError):
        with store.atomic():
            store.transition(job.id, State.PENDING, State.PROVISIONING, "one")
            store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "two")
            with other.connect() as conn:  # another connection sees neither move yet
                assert conn.execute(text("SELECT state FROM job")).scalar() == "PENDING"
            raise RuntimeError("crash inside the block")
    assert store.get(job.id).state == "PENDING"
    assert [e.kind for e in store.events(job.id)] == ["created"]


def _skewed(monkeypatch, seconds: float) -> None:
    """This node's clock `seconds` off, as a lab node without NTP would have it
    (TPUJOB_CLOCK_SKEW_SECONDS: the node's own time, store/clock.py `node_time`)."""
    monkeypatch.setenv("TPUJOB_CLOCK_SKEW_SECONDS", str(seconds))


def _server_now(url: str) -> float:
    with create_engine(url).connect() as conn:
        return float(conn.execute(text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar_one())


@pytest.mark.parametrize("skew", [-600.0, 600.0])
def test_a_node_whose_clock_is_off_writes_the_store_servers_time(postgres_url, monkeypatch, skew):
    # A lab node 10 minutes off: its timestamps would be 10 minutes off for every other node
    # (a state's age, a backoff, `list`'s ages). The store's clock is the server's.
    from tpujob.store.repository import open_store

    _skewed(monkeypatch, skew)
    store = open_store(postgres_url)
    job = store.add_job(name="j", spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="z", project="p",
                        cloud="local")
    assert abs(job.created_at - _server_now(postgres_url)) < 5
    assert abs(store.clock() - _server_now(postgres_url)) < 5


def test_a_lease_holds_against_a_node_whose_clock_runs_ahead(postgres_url, monkeypatch):
    # Node A takes a job's lease for 90 s; node B's clock runs 10 minutes ahead. Judged on B's
    # own clock, A's lease "expired" 8 minutes ago and B would act on the job beside A.
    from tpujob.store.repository import open_store

    a = open_store(postgres_url)
    job = a.add_job(name="j", spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="z", project="p",
                    cloud="local")
    a.acquire_lease(job.id, "node-a", 90)
    _skewed(monkeypatch, 600)
    b = open_store(postgres_url)  # as node B's commands open it
    with pytest.raises(JobLocked):
        b.acquire_lease(job.id, "node-b", 90)
    assert b.get(job.id).lease_owner == "node-a"


def _tpujob(home: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TPUJOB_HOME": str(home), "TPUJOB_DB_URL": url}
    return subprocess.run([sys.executable, "-m", "tpujob.cli.main", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_the_cli_on_a_postgresql_store_lists_what_another_node_recorded(postgres_url, tmp_path):
    from tpujob.store.repository import open_store

    store = open_store(postgres_url)
    for i in range(3):
        store.add_job(name=f"lab-{i}", spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="z",
                      project="p", cloud="local")
    listed = _tpujob(tmp_path / "other-node", postgres_url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["name"] for row in json.loads(listed.stdout)] == ["lab-0", "lab-1", "lab-2"]
    assert "lab-1" in _tpujob(tmp_path / "other-node", postgres_url, "list").stdout


def test_an_unreachable_postgresql_store_is_one_line_naming_it_without_the_password(tmp_path):
    from pg_cluster import _free_port

    url = f"postgresql+psycopg://lab:s3cr3t@127.0.0.1:{_free_port()}/tpujob"
    done = _tpujob(tmp_path, url, "list")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "s3cr3t" not in done.stderr and "127.0.0.1" in lines[0]
