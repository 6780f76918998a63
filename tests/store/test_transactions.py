"""`with store.atomic():` groups store calls into one transaction: they commit together or not
at all, a nested block joins the outer one, and a lost compare-and-set rolls back the whole
block. Another process (WAL) sees nothing of a block until it commits."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from spec_texts import STORED

from tpujob.errors import IllegalTransition, NotFoundError
from tpujob.store.repository import Store, open_store
from tpujob.store.states import State

# What another process sees: a plain read of the file, as `tpujob list` does (WAL: no waiting).
PEEK = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute("SELECT id, state FROM job ORDER BY id").fetchall()
events = conn.execute("SELECT count(*) FROM event").fetchone()[0]
print(json.dumps({"jobs": rows, "events": events}))
"""

# Another process's compare-and-set on the same job, racing the block.
RACE = """
import sys
from tpujob.errors import IllegalTransition
from tpujob.store.repository import open_store
from tpujob.store.states import State
try:
    open_store(sys.argv[1]).transition(int(sys.argv[2]), State.PENDING, State.PROVISIONING, "other process")
    print("won")
except IllegalTransition:
    print("lost")
"""


@pytest.fixture
def db(tmp_path):
    return tmp_path / "store.db"


@pytest.fixture
def store(db) -> Store:
    return open_store(f"sqlite:///{db}")


def _add(store: Store, name: str = "demo"):
    return store.add_job(name=name, spec_yaml="name: demo\n", spec_json=STORED, accelerator="v4-8",
                         zone="us-central2-b", project="p", cloud="local")


def _peek(db) -> dict:
    out = subprocess.run([sys.executable, "-c", PEEK, str(db)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _story(store: Store, job_id: int) -> list[tuple]:
    return [(e.kind, e.from_state, e.to_state) for e in store.events(job_id)]


def test_a_raise_inside_the_block_leaves_nothing_written(store, db):
    job_id = _add(store).id
    before = _peek(db)
    with pytest.raises(RuntimeError, match="act failed"):
        with store.atomic():
            _add(store, "second")
            store.start_attempt(job_id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                                accelerator="v4-8", queued=False)
            store.transition(job_id, State.PROVISIONING, State.SETTING_UP, "ready")
            store.add_event(job_id, "note", "hello")
            raise RuntimeError("act failed")
    assert _peek(db) == before == {"jobs": [[job_id, "PENDING"]], "events": 1}
    assert store.attempts(job_id) == [] and store.get(job_id).attempt == 0


def test_two_transitions_commit_together_and_no_other_process_sees_one_alone(store, db):
    job_id = _add(store).id
    with store.atomic():
        first = store.transition(job_id, State.PENDING, State.PROVISIONING, "requested")
        second = store.transition(job_id, State.PROVISIONING, State.SETTING_UP, "ready")
        assert store.get(job_id).state == "SETTING_UP"  # the block reads its own writes
        assert _peek(db) == {"jobs": [[job_id, "PENDING"]], "events": 1}  # nothing committed yet
    assert (first.state, second.state) == ("PROVISIONING", "SETTING_UP")  # snapshots, as outside
    assert _peek(db) == {"jobs": [[job_id, "SETTING_UP"]], "events": 3}
    assert _story(store, job_id) == [("created", None, "PENDING"), ("state", "PENDING", "PROVISIONING"),
                                     ("state", "PROVISIONING", "SETTING_UP")]


def test_another_process_racing_the_block_loses_the_compare_and_set(store, db):
    job_id = _add(store).id
    with store.atomic():
        store.transition(job_id, State.PENDING, State.PROVISIONING, "this process")
        # The other process queues on the write lock the block holds, and runs after commit.
        other = subprocess.Popen([sys.executable, "-c", RACE, f"sqlite:///{db}", str(job_id)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        store.transition(job_id, State.PROVISIONING, State.SETTING_UP, "this process")
    out, err = other.communicate(timeout=120)
    assert (other.returncode, out.strip()) == (0, "lost"), err
    assert store.get(job_id).state == "SETTING_UP"
    assert [e.message for e in store.events(job_id)][1:] == ["this process", "this process"]


def test_outside_a_block_each_call_commits_alone(store, db):
    job_id = _add(store).id
    store.transition(job_id, State.PENDING, State.PROVISIONING, "requested")
    with pytest.raises(IllegalTransition):
        store.transition(job_id, State.PENDING, State.PROVISIONING, "stale")
    assert _peek(db) == {"jobs": [[job_id, "PROVISIONING"]], "events": 2}


def test_a_lost_compare_and_set_rolls_back_the_whole_block_even_when_caught(store, db):
    job_id = _add(store).id
    other_id = _add(store, "other").id
    with pytest.raises(IllegalTransition, match="is PENDING, not RUNNING"):
        with store.atomic():
            store.transition(other_id, State.PENDING, State.PROVISIONING, "requested")
            try:
                store.transition(job_id, State.RUNNING, State.RECOVERING, "stale view")
            except IllegalTransition:
                pass  # swallowed: the block must still not commit its other half
            store.add_event(job_id, "note", "after the lost race")
    assert _peek(db) == {"jobs": [[job_id, "PENDING"], [other_id, "PENDING"]], "events": 2}


def test_a_nested_block_joins_the_outer_one(store, db):
    job_id = _add(store).id
    with store.atomic():
        with store.atomic():
            store.transition(job_id, State.PENDING, State.PROVISIONING, "inner")
        assert _peek(db)["jobs"] == [[job_id, "PENDING"]]  # the inner block committed nothing
        store.transition(job_id, State.PROVISIONING, State.SETTING_UP, "outer")
    assert _peek(db) == {"jobs": [[job_id, "SETTING_UP"]], "events": 3}


def test_an_error_leaving_a_nested_block_rolls_back_the_outer_one(store, db):
    job_id = _add(store).id
    with pytest.raises(RuntimeError, match="inner failed"):
        with store.atomic():
            store.transition(job_id, State.PENDING, State.PROVISIONING, "outer")
            try:
                with store.atomic():
                    store.add_event(job_id, "note", "inner")
                    raise RuntimeError("inner failed")
            except RuntimeError:
                pass
    assert _peek(db) == {"jobs": [[job_id, "PENDING"]], "events": 1}


def test_a_read_that_finds_nothing_does_not_spoil_the_block(store):
    job_id = _add(store).id
    with store.atomic():
        with pytest.raises(NotFoundError):
            store.get(999999)
        store.transition(job_id, State.PENDING, State.PROVISIONING, "requested")
    assert store.get(job_id).state == "PROVISIONING"


def test_a_block_belongs_to_its_thread(store):
    """The sweep's act workers share one Store: another thread's call commits on its own, after
    the block lets go of the write lock, whatever becomes of the block."""
    job_id = _add(store).id
    with pytest.raises(RuntimeError):
        with store.atomic():
            store.add_event(job_id, "note", "the block's")
            worker = threading.Thread(target=store.add_event, args=(job_id, "note", "the worker's"))
            worker.start()
            raise RuntimeError("block failed")
    worker.join(timeout=60)
    assert [e.message for e in store.events(job_id) if e.kind == "note"] == ["the worker's"]
