"""`tpujob zones` ranks by the store's history; `tpujob report` adds the ledgers up."""

from __future__ import annotations

import json
import time

import pytest
from spec_texts import STORED

from tpujob.service.context import Context
from tpujob.store.states import EndReason, State

ACC = "v5litepod-8"


def _night(store, now, name, zone, *, runs, run_seconds, preempted=True, owner="ann"):
    """A job of `runs` attempts in `zone`, each up 100 s after its request and running
    `run_seconds`, all preempted but (unless `preempted`) the last, which is cancelled."""
    job = store.add_job(name=name, spec_yaml="", spec_json=STORED, accelerator=ACC, zone=zone,
                        project="p", cloud="local", owner=owner)
    start = State.PENDING
    for i in range(runs):
        store.start_attempt(job.id, start, State.PROVISIONING, "go", zone=zone, accelerator=ACC, queued=False)
        now[0] += 100
        store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")
        store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")
        now[0] += run_seconds
        if preempted or i < runs - 1:
            store.transition(job.id, State.RUNNING, State.RECOVERING, "preempted", preemptions=1)
            store.end_attempt(job.id, i + 1, "preempted")
            now[0] += 50
            start = State.RECOVERING
        else:
            store.transition(job.id, State.RUNNING, State.CANCELLED, "cancelled")
            store.end_attempt(job.id, i + 1, "cancelled")
    if preempted:
        store.transition(job.id, State.RECOVERING, State.FAILED, "out of preemptions",
                         end_reason=EndReason.PREEMPTION_BUDGET)
    return job


@pytest.fixture
def lab():
    # the CLI's now is the real clock's: the nights are laid out to end 10 minutes before it
    now = [time.time() - 6 * 750 - 20100 - 600]
    store = Context.load().store
    store.clock = lambda: now[0]
    _night(store, now, "flaky", "us-east5-a", runs=6, run_seconds=600)  # preempted every 10 minutes
    _night(store, now, "calm", "us-east5-b", runs=1, run_seconds=20000, preempted=False, owner="bob")
    return now


def test_zones_rank_by_the_store_s_history(cli, lab):
    result = cli("zones", ACC, "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    order = [r["zone"] for r in rows]
    assert order[0] == "us-east5-b" and order[-1] == "us-east5-a"
    flaky = rows[-1]
    assert (flaky["requests"], flaky["got_capacity"], flaky["runs"], flaky["interruptions"]) == (6, 6, 6, 6)
    assert flaky["expected_wait_seconds"] == pytest.approx(100)
    assert flaky["ran_seconds"] == pytest.approx(6 * 600)  # READY to each attempt's end
    printed = cli("zones", ACC).out
    assert printed.splitlines()[1].startswith("us-east5-b")


def test_zones_cold_start_says_so(cli):
    result = cli("zones", ACC)
    assert result.code == 0, result.err
    assert "no history yet" in result.out


def test_zones_refuses_a_bad_accelerator(cli):
    result = cli("zones", "v9-8")
    assert result.code == 2 and "v9" in result.err


def test_report_by_zone_adds_the_ledgers_up(cli, lab):
    result = cli("report", "--by", "zone", "--json")
    assert result.code == 0, result.err
    rows = {r["key"]: r for r in json.loads(result.out)["rows"]}
    assert set(rows) == {"us-east5-a", "us-east5-b"}
    flaky = rows["us-east5-a"]
    assert flaky["jobs"] == 1
    assert flaky["wall_seconds"] == pytest.approx(sum(flaky["buckets"].values()))
    assert flaky["buckets"]["running"] == pytest.approx(6 * 600)
    assert flaky["buckets"]["provisioning"] == pytest.approx(6 * 100)
    # Google publishes no spot price for v5e: no dollars rather than a guess
    assert flaky["total_dollars"] is None and flaky["training_hours_per_dollar"] is None


def test_report_by_user_and_window(cli, lab):
    rows = {r["key"]: r for r in json.loads(cli("report", "--by", "user", "--json").out)["rows"]}
    assert set(rows) == {"ann", "bob"}
    # the last hour: only the calm job's last 50 minutes of running (it ended 10 minutes ago)
    recent = json.loads(cli("report", "--since", "1h", "--json").out)["rows"]
    assert [r["key"] for r in recent] == ["bob"]
    assert recent[0]["wall_seconds"] == pytest.approx(3000, abs=30)
    assert recent[0]["buckets"]["running"] == pytest.approx(recent[0]["wall_seconds"])


@pytest.mark.parametrize("args, words", [
    (["--since", "a week"], "--since"),
    (["--by", "team"], "--by must be one of user, zone, accelerator"),
])
def test_report_refuses_bad_options(cli, args, words):
    result = cli("report", *args)
    assert result.code == 2 and words in result.err


def test_report_with_no_jobs(cli):
    result = cli("report")
    assert result.code == 0 and "no jobs in the last 7d" in result.out


AUTO = """\
name: auto
tpu:
  accelerator: v5litepod-8
  zone: us-east5-a
  placement: {placement}
  fallback:
    - zone: us-east5-b
    - zone: us-west4-a
run:
  command: python train.py
"""


@pytest.mark.parametrize("placement, history, first, order", [
    # the flaky zone written first is tried last; the calm one first, the unseen one between
    ("auto", True, "us-east5-b", ["us-east5-b", "us-west4-a", "us-east5-a"]),
    ("auto", False, "us-east5-a", ["us-east5-a", "us-east5-b", "us-west4-a"]),  # cold start: as written
    ("ordered", True, "us-east5-a", ["us-east5-a", "us-east5-b", "us-west4-a"]),
])
def test_placement_auto_orders_by_the_history(tmp_path, request, placement, history, first, order):
    from tpujob.service import jobs
    from tpujob.spec.stored import spec_of

    if history:
        request.getfixturevalue("lab")
    path = tmp_path / "job.yaml"
    path.write_text(AUTO.format(placement=placement))
    ctx = Context.load()
    job, _ = jobs.record(ctx, str(path))
    assert job.zone == first
    assert [z for _, z in spec_of(ctx.store.get(job.id)).placements()] == order
    said = [e.message for e in ctx.store.events(job.id) if e.kind == "placement"]
    if placement == "ordered":
        assert said == []
    elif history:
        assert said[0].startswith("placement auto, best first by expected goodput per dollar: us-east5-b")
        assert "us-east5-a (v5litepod-8): MTBI" in said[0] and "6 runs, 6 interruptions" in said[0]
    else:
        assert said == ["placement auto: no history yet, the spec's order"]
