"""The ledger: a job's wall time cut into buckets that add up to it, and their dollars."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tpujob.runtime.contract import Reported
from tpujob.service.ledger import BUCKETS, add_up, attempt_ledgers, job_ledger

PRICE = 3.6  # USD per slice-hour: a second costs 0.001


def _job(created=0.0, ended=None):
    return SimpleNamespace(created_at=created, ended_at=ended)


def _attempt(number, start, end=None, reason=None, *, reported=None, last_step=None, resumed=None,
             progress=None, slices=1):
    return SimpleNamespace(number=number, started_at=start, ended_at=end, end_reason=reason,
                           accelerator="v5litepod-8", slices=slices, last_step=last_step,
                           resumed_from_step=resumed, progress=progress,
                           reported=None if reported is None else json.dumps(reported))


def _events(*moves):
    return [SimpleNamespace(at=at, to_state=state) for at, state in moves]


def _price(accelerator):
    return PRICE


def _nonzero(led):
    return {k: round(v, 6) for k, v in led.buckets.items() if v}


CASES = {
    # a stockout (attempt 1 never got a slice), backoff, then a slice, setup and an unreported run
    "stockout then an unreported run": (
        _job(0, 1000),
        [_attempt(1, 10, 60, "no_capacity"), _attempt(2, 100, 1000, "succeeded")],
        _events((10, "PROVISIONING"), (60, "RECOVERING"), (100, "PROVISIONING"), (150, "SETTING_UP"),
                (300, "RUNNING"), (1000, "SUCCEEDED")),
        {"waiting": 60, "recovering": 40, "provisioning": 50, "setup": 150, "running": 700},
        ("checkpoint", "compile", "lost_work", "restore")),
    # the runtime measured restore, compile, checkpoints; the rest is training
    "a reported run": (
        _job(0, 500),
        [_attempt(1, 0, 500, "succeeded", reported={"restore_ms": 20000, "compile_ms": 30000,
                                                     "checkpoint_ms": 50000, "step_ms": 1000})],
        _events((0, "PROVISIONING"), (50, "SETTING_UP"), (100, "RUNNING"), (500, "SUCCEEDED")),
        {"provisioning": 50, "setup": 50, "restore": 20, "compile": 30, "checkpoint": 50, "training": 300},
        ()),
    # preempted at step 400, resumed from 300: 100 steps redone at 0.5 s each
    "a preemption's lost work": (
        _job(0, 1000),
        [_attempt(1, 0, 400, "preempted", last_step=400, reported={"step_ms": 500}),
         _attempt(2, 450, 1000, "succeeded", resumed=300, reported={"step_ms": 500})],
        _events((0, "PROVISIONING"), (0, "SETTING_UP"), (100, "RUNNING"), (400, "RECOVERING"),
                (450, "PROVISIONING"), (500, "SETTING_UP"), (600, "RUNNING"), (1000, "SUCCEEDED")),
        {"setup": 200, "training": 300 + 350, "recovering": 50, "provisioning": 50, "lost_work": 50},
        ()),
    # no progress after t=300 on an attempt that ended hung
    "a hung attempt": (
        _job(0, None),
        [_attempt(1, 0, 700, "hung", progress=json.dumps([[200, 5], [300, 9]]))],
        _events((0, "SETTING_UP"), (100, "RUNNING"), (700, "RECOVERING")),
        {"setup": 100, "running": 200, "hung": 400, "recovering": 100},
        ("checkpoint", "compile", "lost_work", "restore")),
    # cancelled: the time after it is stopped, no slice to pay for
    "cancelled then still open": (
        _job(0, None),
        [_attempt(1, 0, 200, "cancelled")],
        _events((0, "SETTING_UP"), (200, "CANCELLED")),
        {"setup": 200, "stopped": 600},
        ()),
    # no events yet: waiting since creation
    "a new job": (_job(0, None), [], [], {"waiting": 800}, ()),
}


@pytest.mark.parametrize("name", CASES)
def test_buckets_add_up_to_the_wall_time(name):
    job, attempts, events, expected, unreported = CASES[name]
    led = job_ledger(job, attempts, events, 800.0, _price)
    assert _nonzero(led) == expected
    assert set(led.buckets) == set(BUCKETS)
    assert sum(led.buckets.values()) == pytest.approx(led.wall_seconds, abs=1e-6)
    assert led.not_reported == unreported


def test_dollars_are_the_slice_s_price_while_it_exists():
    job, attempts, events, _, _ = CASES["stockout then an unreported run"]
    led = job_ledger(job, attempts, events, 800.0, _price)
    assert led.dollars["waiting"] == 0  # no slice
    assert led.dollars["recovering"] == 0  # between attempts: the slice is gone
    assert led.dollars["provisioning"] == pytest.approx(0.05)
    assert led.dollars["running"] == pytest.approx(0.7)
    unpriced = job_ledger(job, attempts, events, 800.0, lambda accelerator: None)
    assert unpriced.dollars["running"] is None and unpriced.dollars["waiting"] == 0


def test_multislice_attempts_pay_per_slice():
    job = _job(0, 100)
    attempts = [_attempt(1, 0, 100, "succeeded", slices=2)]
    led = job_ledger(job, attempts, _events((0, "RUNNING"), (100, "SUCCEEDED")), 100.0, _price)
    assert led.dollars["running"] == pytest.approx(0.2)


def test_attempt_ledgers_cover_the_job_s_wall_time():
    job, attempts, events, _, _ = CASES["a preemption's lost work"]
    rows = attempt_ledgers(job, attempts, events, 1000.0, _price)
    assert [n for n, _ in rows] == [1, 2]
    assert rows[0][1].buckets["recovering"] == 50  # the recovery after an attempt is on its row
    assert rows[1][1].buckets["lost_work"] == 50
    wall, seconds, _ = add_up([led for _, led in rows])
    assert wall == pytest.approx(1000) and sum(seconds.values()) == pytest.approx(1000)


@pytest.mark.parametrize("raw, expected", [
    (None, None), ("", None), ("not json", None), ("[1]", None),
    ('{"compile_ms": 1500, "save_ms": 2000, "step_ms": -1}', Reported(compile=1.5, save=2.0)),
])
def test_reported_reads_the_attempt_s_column(raw, expected):
    assert Reported.parse(raw) == expected
