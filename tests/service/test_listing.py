"""`list` reads rows without the ORM and without the store's write lock, and prints the same
text and JSON as before (the JSON through the C encoder, the table through one format string)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from spec_texts import STORED

from tpujob.cli import render
from tpujob.service.context import Context
from tpujob.store.states import State

ROOT = Path(__file__).resolve().parents[2]


def _add(store, name: str):
    return store.add_job(name=name, spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="us-central2-b",
                         project="p", cloud="local")


def _tpujob(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TPUJOB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "tpujob.cli.main", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=20)


def test_list_answers_while_another_process_holds_the_write_lock(tpujob_home):
    store = Context.load().store
    job = _add(store, "held")
    writer = sqlite3.connect(tpujob_home / "tpujob.db", isolation_level=None)
    try:
        # A sweep in the middle of a write: list waits for nothing and shows what is committed.
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE job SET state = 'RUNNING' WHERE id = ?", (job.id,))
        for args in (["list", "--json"], ["list", "--all"]):
            done = _tpujob(tpujob_home, *args)
            assert done.returncode == 0, done.stderr
            assert "PENDING" in done.stdout and "RUNNING" not in done.stdout
    finally:
        writer.execute("ROLLBACK")
        writer.close()


PROBE = """
import json, sys
from tpujob.cli.main import main
code = main(sys.argv[1:])
orm = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlmodel', 'pydantic_settings')
             or m.startswith(('sqlalchemy.orm', 'tpujob.store.models', 'tpujob.store.repository')))
print(json.dumps({"code": code, "orm": orm}))
"""


@pytest.mark.parametrize("args", [["list"], ["list", "--all", "--json"]])
def test_list_never_loads_the_orm(tpujob_home, args):
    store = Context.load().store
    _add(store, "one")
    env = {**os.environ, "TPUJOB_HOME": str(tpujob_home)}
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"code": 0, "orm": []}, out.stderr


def test_list_goodput_is_computed_from_the_listed_columns(cli):
    now = [1000.0]
    store = Context.load().store
    store.clock = lambda: now[0]
    job = _add(store, "half")
    store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")
    now[0] = 1050.0
    store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")
    now[0] = 1100.0
    store.transition(job.id, State.RUNNING, State.CANCELLED, "stop")  # 50 s running of 100 s
    row, = json.loads(cli("list", "--all", "--json").out)
    assert (row["state"], row["goodput"]) == ("CANCELLED", 0.5)
    assert "50%" in cli("list", "--all").out.splitlines()[1].split()


def _summary(**values):
    from tpujob.store.summaries import JobSummary

    row = dict(id=7, name="j", state="RUNNING", end_reason=None, accelerator="v4-8", zone="us-central2-b",
               project="p", cloud="local", attempt=1, preemptions=0, failures=0, nan_restarts=0,
               host0_ip=None, created_at=1000.0, updated_at=1500.25, ended_at=None, observed_at=None,
               state_since=1200.0, running_seconds=0.0)
    return JobSummary(**{**row, **values})


@pytest.mark.parametrize("jobs", [
    [],
    [_summary()],
    [_summary(name='we"ird\n\tname \u00fc }', end_reason="preemption_budget", host0_ip="10.0.0.2",
              ended_at=1999.9999996, observed_at=86399.9999994, state="FAILED", id=1234567),
     _summary(id=8, name="{\n    }", created_at=1.7e9, updated_at=1.7e9 + 0.5, running_seconds=12.0,
              owner='ad"a@lab.example', from_node="login-1")],
])
def test_jobs_json_prints_exactly_as_the_indented_job_dicts(capsys, monkeypatch, jobs):
    monkeypatch.setattr(render.time, "time", lambda: 2000.0)  # goodput of a running job moves with the clock
    render.print_jobs_json(jobs)
    fast = capsys.readouterr().out
    render.print_json([render.job_dict(j) for j in jobs])
    assert fast == capsys.readouterr().out


def test_iso_times_match_datetime_to_the_second():
    import random
    from datetime import datetime, timezone

    random.seed(7)
    stamps = [0.0, 0.9999994, 0.9999995, 59.5, 86399.9999996, 951782400.0, 4102444799.9999999]
    stamps += [random.uniform(0, 4.2e9) for _ in range(20000)]
    assert [render.iso(t) for t in stamps] == [
        datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds") for t in stamps]
    assert render.iso(None) is None


def test_table_aligns_every_cell_as_str_shows_it():
    text = render.table(["ID", "NAME", "STEP"], [["000001", None, 12345], ["000002", "a-long-name", "-"]])
    assert text.splitlines() == ["ID      NAME         STEP",
                                 "000001  None         12345",
                                 "000002  a-long-name  -"]
    assert render.table(["ID", "NAME"], []) == "ID  NAME"


def test_summary_columns_are_the_models():
    """JobSummary lists its columns again (`list` imports no ORM, so it cannot derive them from
    models.Job): each is the model's, by name and by type."""
    from tpujob.store.models import Attempt, Job
    from tpujob.store.summaries import _ATTEMPT_FIELDS, JobSummary

    def text(annotation):
        return getattr(annotation, "__forward_arg__", annotation)

    for name, annotation in JobSummary.__annotations__.items():
        model = Attempt if name in _ATTEMPT_FIELDS else Job
        wanted = text(model.__annotations__[name])
        if model is Attempt and "None" not in wanted:
            wanted += " | None"  # no attempt yet: the outer join's None
        assert text(annotation) == wanted, name
