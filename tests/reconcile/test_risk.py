"""The measured risk of a placement: evidence, Young's interval, and placements by goodput per dollar."""

from __future__ import annotations

import math

import pytest

from tpujob.reconcile.risk import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    PRIOR_MTBI,
    Key,
    Sample,
    checkpoint_seconds,
    checkpoint_steps,
    evidence,
    ordered,
    useful_fraction,
)

A = Key("us-east5-a", "v5litepod-8", "spot")
B = Key("us-east5-b", "v5litepod-8", "spot")
C = Key("us-west4-a", "v5litepod-8", "spot")


@pytest.mark.parametrize("save, mtbi, expected", [
    (60, 3600, math.sqrt(2 * 60 * 3600)),  # about 11 minutes
    (30, 24 * 3600, math.sqrt(2 * 30 * 24 * 3600)),
    (1, 100, MIN_INTERVAL),  # bounded below
    (600, 30 * 24 * 3600, MAX_INTERVAL),  # bounded above
    (0, 3600, MIN_INTERVAL),
])
def test_checkpoint_seconds_is_young_s_interval_bounded(save, mtbi, expected):
    assert checkpoint_seconds(save, mtbi) == pytest.approx(expected)


@pytest.mark.parametrize("interval, step, expected", [(600, 2.0, 300), (600, 0.0, 1), (1, 5.0, 1)])
def test_checkpoint_steps(interval, step, expected):
    assert checkpoint_steps(interval, step) == expected


def test_young_s_interval_is_where_the_useful_fraction_peaks():
    save, mtbi = 60.0, 4 * 3600.0
    best = checkpoint_seconds(save, mtbi)
    for other in (best / 3, best * 3):
        assert useful_fraction(save, mtbi, 0, best) > useful_fraction(save, mtbi, 0, other)


def test_evidence_counts_waits_runs_and_interruptions():
    found = evidence([
        Sample(A, waited=100, got_slice=False, ran=0, interrupted=False),  # a stockout
        Sample(A, waited=50, got_slice=True, ran=3600, interrupted=True),
        Sample(A, waited=30, got_slice=True, ran=1800, interrupted=False),
        Sample(B, waited=600, got_slice=False, ran=0, interrupted=False),
    ])
    a = found[A]
    assert (a.requests, a.capacity, a.runs, a.interruptions) == (3, 2, 2, 1)
    assert a.expected_wait == pytest.approx(180 / 2)
    assert a.interruption_rate == pytest.approx(1 / 5400)
    assert found[B].expected_wait is None and found[B].interruption_rate is None
    assert a.mtbi(prior=PRIOR_MTBI) == pytest.approx((5400 + PRIOR_MTBI) / 2)


def _price(accelerator):
    return {"v5litepod-8": 9.6, "v6e-8": 21.6}.get(accelerator)


PLACES = [("v5litepod-8", A.zone), ("v5litepod-8", B.zone), ("v5litepod-8", C.zone)]


def _runs(key, hours, interruptions):
    return [Sample(key, 0, True, hours * 3600 / max(1, interruptions), True) for _ in range(interruptions)] or \
        [Sample(key, 0, True, hours * 3600, False)]


ORDER_CASES = {
    "cold start keeps the spec's order": ([], [0, 1, 2]),
    "the zone that preempts most goes last": (_runs(A, 10, 20) + _runs(B, 10, 1) + _runs(C, 10, 3), [1, 2, 0]),
    "a zone never seen ranks at the lab's mean": (_runs(A, 50, 50) + _runs(B, 50, 1), [1, 2, 0]),
    # C, never seen, at the lab's mean (B's history and the prior) beats B, which preempts often
    "a zone that never had capacity goes last": (
        [Sample(A, 3600, False, 0, False)] + _runs(B, 10, 5), [2, 1, 0]),
}


@pytest.mark.parametrize("name", ORDER_CASES)
def test_ordered_by_goodput_per_dollar(name):
    samples, expected = ORDER_CASES[name]
    assert [c.index for c in ordered(PLACES, "spot", evidence(samples), _price)] == expected


def test_a_cheaper_accelerator_wins_on_equal_risk():
    places = [("v6e-8", A.zone), ("v5litepod-8", A.zone)]
    assert [c.index for c in ordered(places, "spot", {}, _price)] == [1, 0]


def test_no_price_no_score_but_still_ranked_by_risk():
    samples = _runs(A, 10, 20) + _runs(B, 10, 1)
    ranked = ordered(PLACES[:2], "spot", evidence(samples), lambda accelerator: None)
    assert [c.index for c in ranked] == [1, 0]
    assert all(c.score is None for c in ranked) and ranked[0].useful > ranked[1].useful


@pytest.mark.parametrize("hours, interruptions", [(24, 24), (48, 12), (200, 50)])
def test_the_auto_interval_is_within_20_percent_of_young_s_for_what_the_store_measured(hours, interruptions):
    """Issue 49's bar: once a placement has a history, the interval from the M handed to the
    runtime (shrunk toward the lab's mean by one pseudo-interruption) is within 20 % of
    sqrt(2*C*M) for the M the store measured (seconds ran / interruptions) and the runtime's C.
    With n interruptions and the lab's mean r times this zone's M, the M handed is (n + r)/(n + 1)
    of it: within 20 % of the interval (M within 1.44x) takes n >= (r - 1.44)/0.44 (and n >= 3
    where r < 1); here A's M is 5.5x below the lab's (B is calm), so 10 interruptions or more."""
    from tpujob.reconcile.risk import prior_mtbi

    save = 45.0
    found = evidence(_runs(A, hours, interruptions) + _runs(B, 100, 2))
    handed = found[A].mtbi(prior_mtbi(found, A.accelerator, A.provisioning))
    measured = hours * 3600 / interruptions
    assert checkpoint_seconds(save, handed) == pytest.approx(math.sqrt(2 * save * measured), rel=0.2)
