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
    # Where it is in the queue, and why its start cannot be estimated: no holder has started yet.
    assert "\nqueue:        position 1 in the lab's queue (tpujob queue)\n" in shown
    unknown = (f"unknown: alice's job {a.id:06d} has not started running (PENDING); "
               f"carol's job {c.id:06d} has not started running (PENDING)")
    assert f"\nstarts:       {unknown}\n" in shown
    as_json = json.loads(cli("show", str(b.id), "--json").out)
    assert {k: as_json[k] for k in ("waiting_for", "queue_position", "starts_in_seconds", "starts")} == {
        "waiting_for": "quota: 16/16 v4 chips in us-central2 held by alice 8, carol 8; 1st in band normal",
        "queue_position": 1, "starts_in_seconds": None, "starts": unknown}
    admitted = json.loads(cli("show", str(a.id), "--json").out)  # not QUEUED: no place in the queue
    assert (admitted["queue_position"], admitted["starts"]) == (None, None)
    assert "\nstarts:" not in cli("show", str(a.id)).out
    queue = json.loads(cli("queue", "--json").out)
    assert [(q["position"], q["id"], q["priority"], q["chips"], q["waiting_for"]) for q in queue] == [
        (1, f"{b.id:06d}", "normal", 8,
         "quota: 16/16 v4 chips in us-central2 held by alice 8, carol 8; 1st in band normal")]
    assert json.loads(cli("show", str(c.id), "--json").out)["priority"] == "high"


def test_show_estimates_a_queued_jobs_start_from_the_running_jobs_progress(cli, record_as):
    """`show`, text and --json, gives the queue's estimate (service/quotas.queue, the one
    `tpujob queue` prints): when the running job's progress frees the chips."""
    from tpujob.reconcile.scheduling import admit_queued
    from tpujob.store.states import State

    cli("quota", "set", "v4", "8")
    running, waiting = record_as("alice"), record_as("bob")
    store = Context.load().store
    assert admit_queued(store).admitted == [running.id]
    store.start_attempt(running.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                        accelerator="v4-16", queued=False)
    store.transition(running.id, State.PROVISIONING, State.SETTING_UP, "ready")
    store.transition(running.id, State.SETTING_UP, State.RUNNING, "launched")
    now = store.clock()
    # 100 steps in 100 s, 900 left of 1,000: about 15 minutes.
    store.record_steps(running.id, 1, last_step=0, total_steps=1000, at=now - 100)
    store.record_steps(running.id, 1, last_step=100, at=now)

    as_json = json.loads(cli("show", str(waiting.id), "--json").out)
    assert as_json["queue_position"] == 1 and as_json["starts"] == "in about 15m"
    assert as_json["starts_in_seconds"] == pytest.approx(900, abs=5)
    assert as_json["waiting_for"] == "quota: 8/8 v4 chips held by alice 8; 1st in band normal"
    assert "\nstarts:       in about 15m\n" in cli("show", str(waiting.id)).out
    (row,) = json.loads(cli("queue", "--json").out)
    assert (row["starts"], row["starts_in_seconds"]) == ("in about 15m", as_json["starts_in_seconds"])
    assert cli("queue").out.splitlines()[1].split()[7:10] == ["in", "about", "15m"]  # STARTS


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


def test_create_with_queue_follow_0_returns_as_soon_as_the_job_waits(cli, spec_file, local_cloud, monkeypatch):
    # docs/reconcile.md: 0 to 86400, 0 returning at once (a script submitting many jobs).
    monkeypatch.setenv("TPUJOB_QUEUE_FOLLOW_SECONDS", "0")
    monkeypatch.setenv("TPUJOB_USER", "alice")
    assert cli("quota", "set", "v4", "0").code == 0
    path = spec_file("name: q\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun: {command: train}\n")
    result = cli("create", path)
    assert result.code == 0, result.err
    assert result.out.splitlines()[-2] == "job 000001 QUEUED"
    assert Context.load().store.get(1).state == "QUEUED"
