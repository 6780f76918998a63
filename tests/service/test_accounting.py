"""`show` tells the night's story: counters, time in each state, goodput, lost steps."""

from __future__ import annotations

import json

import pytest
from spec_texts import STORED

from tpujob.service.context import Context
from tpujob.store.states import EndReason, State


@pytest.fixture
def story():
    """A job preempted once (step 120, resumed from 100), then failed: times pinned by hand."""
    now = [1000.0]
    store = Context.load().store
    store.clock = lambda: now[0]
    job = store.add_job(name="night", spec_yaml="", spec_json=STORED, accelerator="v4-8", zone="us-central2-b",
                        project="p", cloud="local")
    now[0] = 1010.0
    store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    now[0] = 1020.0
    store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")
    now[0] = 1080.0
    store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")
    store.record_steps(job.id, 1, last_step=120)
    now[0] = 1090.0
    store.transition(job.id, State.RUNNING, State.RECOVERING, "preempted", preemptions=1)
    store.end_attempt(job.id, 1, "preempted")
    now[0] = 1130.0
    store.start_attempt(job.id, State.RECOVERING, State.PROVISIONING, "again", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    store.record_steps(job.id, 2, resumed_from_step=100)
    now[0] = 1140.0
    store.transition(job.id, State.PROVISIONING, State.FAILED, "gave up", end_reason=EndReason.NO_CAPACITY)
    return job


def test_show_json_has_the_accounting(cli, story):
    result = cli("show", "--json", "night")
    assert result.code == 0, result.err
    acc = json.loads(result.out)["accounting"]
    assert (acc["preemptions"], acc["failures"], acc["nan_restarts"]) == (1, 0, 0)
    assert acc["wall_seconds"] == pytest.approx(140.0)
    assert acc["running_seconds"] == pytest.approx(10.0)
    assert acc["goodput"] == pytest.approx(10 / 140)
    assert acc["seconds_in_state"] == pytest.approx(
        {"PENDING": 10.0, "PROVISIONING": 10.0 + 10.0, "SETTING_UP": 60.0, "RUNNING": 10.0, "RECOVERING": 40.0,
         "FAILED": 0.0})
    assert acc["lost_steps"] == [{"attempt": 1, "last_step": 120, "resumed_from_step": 100, "lost_steps": 20}]


def test_show_prints_the_accounting(cli, story):
    result = cli("show", "night")
    assert result.code == 0, result.err
    out = result.out
    assert "1 preemptions, 0 failures, 0 NaN restarts" in out
    assert "running 10s of 2m20s wall: goodput 7%" in out
    assert "time in state: PENDING 10s, PROVISIONING 20s, SETTING_UP 1m00s, RUNNING 10s, RECOVERING 40s" in out
    assert "attempt 1 preempted at step 120, next resumed from 100: 20 steps lost" in out
    assert "seen:         never (no sweep yet)" in out


def test_show_json_has_the_ledger(cli, story):
    """The ledger's buckets add up to the wall time; the program reported nothing, so its
    RUNNING time is one `running` bucket and the runtime's own buckets say not reported."""
    result = cli("show", "--json", "night")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    led = data["ledger"]
    assert led["wall_seconds"] == pytest.approx(140.0)
    assert {k: v for k, v in led["buckets"].items() if v} == pytest.approx(
        {"waiting": 10.0, "provisioning": 20.0, "setup": 60.0, "running": 10.0, "recovering": 40.0})
    assert sum(led["buckets"].values()) == pytest.approx(led["wall_seconds"])
    assert led["not_reported"] == ["checkpoint", "compile", "lost_work", "restore"]
    assert led["dollars"]["waiting"] == 0 and led["dollars"]["running"] > 0
    assert [a["ledger"]["wall_seconds"] for a in data["attempts"]] == pytest.approx([120.0, 10.0])


def test_show_splits_what_the_runtime_reported(cli, story):
    store = Context.load().store
    store.record_steps(story.id, 1, reported={"compile_ms": 4000, "step_ms": 100})
    result = cli("show", "--json", "night")
    assert result.code == 0, result.err
    buckets = json.loads(result.out)["ledger"]["buckets"]
    assert (buckets["compile"], buckets["training"], buckets["running"]) == pytest.approx((4.0, 6.0, 0.0))
    printed = cli("show", "night").out
    assert "ledger: setup 1m00s" in printed and "compile 4s" in printed


@pytest.mark.parametrize("reported, line", [
    ({"mtbi_ms": 86400000}, "checkpoint_every auto: not chosen yet (M 1d00h; C is measured at the first save)"),
    ({"mtbi_ms": 7200000, "save_ms": 50000, "interval_ms": 848528},
     "checkpoint_every auto: 14m09s = sqrt(2 x C 50.0s x M 2h00m), bounded"),
])
def test_show_says_the_auto_interval_and_why(cli, story, reported, line):
    store = Context.load().store
    store.record_steps(story.id, 2, reported=reported)
    assert line in cli("show", "night").out
    auto = json.loads(cli("show", "--json", "night").out)["checkpoint_auto"]
    assert auto["mtbi_seconds"] == reported["mtbi_ms"] / 1000


def test_show_says_nothing_of_auto_for_a_fixed_interval(cli, story):
    assert "checkpoint_every auto" not in cli("show", "night").out
    assert json.loads(cli("show", "--json", "night").out)["checkpoint_auto"] is None
