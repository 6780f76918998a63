"""How far a run has got (tpujob/progress.py): the samples kept on the attempt, the rate over the
last minutes and the time left, as `list`, `show` and the dashboard print them."""

from __future__ import annotations

import json

import pytest

from tpujob import progress
from tpujob.progress import add_sample, describe, progress_of, step_text


def series(*points) -> str | None:
    raw = None
    for at, step in points:
        raw = add_sample(raw, at, step)
    return raw


def test_the_rate_is_over_the_samples_and_the_time_left_follows_from_it():
    raw = series(*[(t, t * 3) for t in range(0, 301, 15)])  # 3 steps/s for 5 minutes
    p = progress_of(900, 20000, raw)
    assert p.steps_per_second == pytest.approx(3.0)
    assert p.rate_span_seconds == pytest.approx(300)
    assert p.seconds_left == pytest.approx((20000 - 900) / 3.0)
    assert p.fraction == pytest.approx(0.045)
    assert describe(p) == "step 900/20000 (4.5%), 3 steps/s over the last 5m, about 1h46m left"


def test_only_the_last_ten_minutes_count_once_the_run_slowed_down():
    fast = [(t, t * 10) for t in range(0, 1201, 20)]          # 10 steps/s for 20 minutes
    slow = [(1200 + t, 12000 + t) for t in range(20, 1201, 20)]  # then 1 step/s for 20 more
    raw = series(*fast, *slow)
    assert progress_of(13200, None, raw).steps_per_second == pytest.approx(1.0, rel=0.05)
    assert len(json.loads(raw)) <= progress.WINDOW_SECONDS / progress.MIN_SPACING_SECONDS + 2


def test_rounds_closer_than_the_spacing_move_the_newest_sample_only():
    raw = series(*[(t / 5, t) for t in range(0, 200)])  # `create` following at 0.2 s a round
    samples = json.loads(raw)
    assert samples[-1] == [39.8, 199]
    assert all(b[0] - a[0] >= progress.MIN_SPACING_SECONDS for a, b in zip(samples, samples[1:-1]))
    assert progress_of(199, None, raw).steps_per_second == pytest.approx(5.0, rel=0.01)


def test_a_step_that_goes_back_starts_the_series_again():
    raw = series((0, 100), (30, 200), (60, 150))  # a NaN rollback restored step 150
    assert json.loads(raw) == [[60, 150]]
    assert progress_of(150, 400, raw).steps_per_second is None


def test_no_rate_yet_says_so_and_a_stalled_run_has_a_rate_of_zero():
    once = progress_of(10, 100, series((0, 10)))
    assert (once.steps_per_second, once.seconds_left) == (None, None)
    assert describe(once) == "step 10/100 (10.0%), time left unknown until the step moves"
    stalled = progress_of(10, 100, series((0, 10), (60, 10), (120, 10)))
    assert stalled.steps_per_second == 0 and stalled.seconds_left is None
    assert describe(progress_of(None, None, None)) == "no step reported yet"


def test_a_store_value_that_is_not_a_series_is_started_again():
    assert progress_of(5, None, "not json").steps_per_second is None
    assert json.loads(add_sample('{"a": 1}', 10.0, 5)) == [[10.0, 5]]


def test_step_text_and_json():
    assert (step_text(1250, 20000), step_text(1250, None), step_text(None, 20000)) == ("1250/20000", "1250", "-")
    data = progress_of(900, 20000, series((0, 0), (300, 900))).to_json()
    assert data == {"step": 900, "total": 20000, "steps_per_second": 3.0, "rate_span_seconds": 300,
                    "seconds_left": 6367, "observed_at": 300, "fraction": 0.045}


def test_a_run_at_its_total_estimates_no_time_left():
    done = progress_of(30, 30, series((0, 0), (60, 30)))
    assert describe(done) == "step 30/30 (100.0%), 0.5 steps/s over the last 1m"
