"""`tpujob quota`, `tpujob queue`, and what `list` and `show` say of a job waiting for the lab's
quota (docs/scheduler.md). Jobs are recorded, not swept: nothing here reaches a cloud."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpujob.service.context import Context

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "jobs.example.yaml"  # a v4-16 (8 chips), spot, in us-central2-b

pytestmark = pytest.mark.usefixtures("no_emulator_left")


@pytest.fixture
def record_as(monkeypatch, spec_file):
    """Record the example spec as `user`, in `band` -> the job."""
    from tpujob.service import jobs

    def run(user: str, band: str = "normal"):
        monkeypatch.setenv("TPUJOB_USER", user)
        path = spec_file(EXAMPLE.read_text() + f"priority: {band}\n")
        job, _ = jobs.record(Context.load(), str(path))
        return job

    return run


def test_quota_set_list_and_unset(cli):
    assert cli("quota", "set", "v5litepod", "64", "--region", "us-west4").out == "quota v5e in us-west4: 64 chips\n"
    assert cli("quota", "set", "v4", "32", "--provisioning", "spot").code == 0
    assert cli("quota", "set", "v4", "16", "--provisioning", "spot").code == 0  # changed, not added
    assert cli("quota", "weight", "alice", "2").out == "weight of alice: 2\n"
    listed = json.loads(cli("quota", "list", "--json").out)
    assert listed == {"quotas": [{"family": "v4", "region": None, "provisioning": "spot", "chips": 16, "held": 0},
                                 {"family": "v5e", "region": "us-west4", "provisioning": None, "chips": 64,
                                  "held": 0}],
                      "weights": {"alice": 2.0}}
    assert cli("quota", "unset", "v4", "--provisioning", "spot").code == 0
    missing = cli("quota", "unset", "v4")
    assert (missing.code, missing.error_line) == (3, "error: no quota for v4")


@pytest.mark.parametrize("args,error", [
    (("v9", "8"), "error: 'v9' is neither a TPU generation"),
    (("v4", "8", "--region", "us-central2-b"), "error: --region 'us-central2-b' is not a region like us-west4"),
    (("v4", "8", "--provisioning", "flex"), "error: --provisioning 'flex': one of spot, on-demand"),
    (("--", "v4", "-1"), "error: CHIPS -1: a cap is 0 chips or more"),
])
def test_a_bad_quota_is_one_line_exit_2_and_writes_nothing(cli, args, error):
    result = cli("quota", "set", *args)
    assert result.code == 2 and result.error_line.startswith(error), result.err
    assert json.loads(cli("quota", "list", "--json").out)["quotas"] == []


def test_a_weight_of_zero_is_refused(cli):
    result = cli("quota", "weight", "alice", "0")
    assert (result.code, result.error_line) == (2, "error: WEIGHT 0.0: a share's weight is more than 0 "
                                                   "(1 is everyone's default)")


def test_a_job_under_a_quota_is_queued_and_says_why_it_waits(cli, record_as):
    from tpujob.reconcile.scheduling import admit_queued

    free = record_as("alice")
    assert free.state == "PENDING"  # no quota: as before
    cli("quota", "set", "v4", "16", "--region", "us-central2")
    a, b, c = record_as("alice"), record_as("bob"), record_as("carol", "high")
    assert [j.state for j in (a, b, c)] == ["QUEUED"] * 3
    store = Context.load().store
    from tpujob.store.states import State

    store.transition(free.id, State.PENDING, State.CANCELLED, "test")  # not holding: it never ran
    done = admit_queued(store)
    assert sorted(done.admitted) == sorted([c.id, a.id])  # high first, then the first queued
    assert store.get(b.id).state == "QUEUED"

    listed = cli("list").out.splitlines()
    assert listed[0].split()[-1] == "WAITING-FOR"
    row = next(line for line in listed if line.startswith(f"{b.id:06d}"))
    assert row.endswith("quota: 16/16 v4 chips in us-central2, 1st in band normal")
    shown = cli("show", str(b.id)).out
    assert "waiting for:  quota: 16/16 v4 chips in us-central2 held by alice 8, carol 8; 1st in band normal" in shown
    queue = json.loads(cli("queue", "--json").out)
    assert [(q["position"], q["id"], q["priority"], q["chips"], q["waiting_for"]) for q in queue] == [
        (1, f"{b.id:06d}", "normal", 8,
         "quota: 16/16 v4 chips in us-central2 held by alice 8, carol 8; 1st in band normal")]
    assert json.loads(cli("show", str(c.id), "--json").out)["priority"] == "high"


def test_budget_set_and_list(cli):
    assert cli("budget", "set", "alice", "100", "--per", "week").out == "budget of alice: $100.00 per week\n"
    assert json.loads(cli("budget", "list", "--json").out) == [
        {"user": "alice", "dollars": 100.0, "per": "week", "spent": 0.0}]
    bad = cli("budget", "set", "alice", "100", "--per", "year")
    assert (bad.code, bad.error_line) == (2, "error: --per 'year': one of day, week, month")
    assert json.loads(cli("budget", "list", "--json").out)[0]["per"] == "week"  # unchanged


def test_max_cost_without_a_published_price_is_refused(cli, spec_file):
    # Google publishes no per-chip spot price for v5e (tpujob/catalogue.py).
    text = "name: t\ntpu: {accelerator: v5litepod-8, zone: us-west4-a}\nrun: {command: train}\nmax_cost: 50\n"
    result = cli("validate", spec_file(text))
    assert (result.code, result.error_line) == (
        2, "error: max_cost (line 4): no published price for v5litepod-8 at spot: a cost cap cannot be kept "
           "(remove max_cost, or use spot or on-demand where Google lists a price)")
    ok = cli("validate", spec_file(EXAMPLE.read_text() + "max_cost: 50\n"))
    assert ok.code == 0, ok.err


def test_create_under_a_full_quota_returns_queued_and_says_why(cli, spec_file, local_cloud, monkeypatch):
    monkeypatch.setenv("TPUJOB_QUEUE_FOLLOW_SECONDS", "0.5")  # waiting for the quota: leave it to the sweeps
    monkeypatch.setenv("TPUJOB_USER", "alice")
    assert cli("quota", "set", "v4", "0").code == 0
    path = spec_file("name: q\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun: {command: train}\n")
    result = cli("create", path)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[-2:] == ["job 000001 QUEUED", "waiting for: quota: 0/0 v4 chips; 1st in band normal"]
    assert Context.load().store.current_attempt(1) is None  # nothing asked of Google
