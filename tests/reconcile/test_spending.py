"""Cost caps decided (reconcile/spending.py): what a job and a user spent, and which jobs a cap
stops, as tables."""

from datetime import datetime, timezone

import pytest

from tpujob.reconcile.spending import Cap, Spend, cost, period_start, stops


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


NOW = ts("2026-12-05T10:30:00")  # a Saturday


@pytest.mark.parametrize("period,start", [
    ("day", "2026-12-05T00:00:00"), ("week", "2026-11-30T00:00:00"), ("month", "2026-12-01T00:00:00")])
def test_a_period_starts_at_utc_midnight_monday_or_the_first(period, start):
    assert period_start(period, NOW) == ts(start)


def test_cost_counts_each_attempt_from_its_start_to_its_end_or_now():
    spends = [Spend(1, "alice", 4.0, NOW - 7200, NOW - 3600), Spend(1, "alice", 4.0, NOW - 1800, None)]
    assert cost(spends, NOW) == pytest.approx(6.0)  # 1 h + 0.5 h at $4/h
    assert cost(spends, NOW, since=NOW - 5400) == pytest.approx(4.0)  # 0.5 h + 0.5 h


CASES = [
    # id, jobs (id -> owner, max_cost), spends, budgets, expected stops
    ("under every cap", {1: ("alice", 10.0)}, [Spend(1, "alice", 4.0, NOW - 3600, None)],
     {"alice": Cap(100.0, "day")}, {}),
    ("its max_cost reached", {1: ("alice", 4.0)}, [Spend(1, "alice", 4.0, NOW - 3600, None)], {},
     {1: "max_cost reached: $4.00 of $4.00"}),
    ("its owner's budget reached, by another job of theirs", {2: ("alice", None)},
     [Spend(1, "alice", 4.0, NOW - 5 * 3600, NOW - 3600), Spend(2, "alice", 4.0, NOW - 3600, None)],
     {"alice": Cap(20.0, "day")}, {2: "budget of alice reached: $20.00 of $20.00 this day"}),
    ("yesterday's spend does not count today", {2: ("alice", None)},
     [Spend(1, "alice", 4.0, NOW - 20 * 3600, NOW - 11 * 3600), Spend(2, "alice", 4.0, NOW - 3600, None)],
     {"alice": Cap(20.0, "day")}, {}),
    ("another user's budget is theirs", {1: ("bob", None)}, [Spend(2, "alice", 40.0, NOW - 3600, None)],
     {"alice": Cap(20.0, "week")}, {}),
]


@pytest.mark.parametrize("name,jobs,spends,budgets,expected", CASES, ids=[c[0] for c in CASES])
def test_stops(name, jobs, spends, budgets, expected):
    assert stops(jobs, spends, budgets, NOW) == expected
