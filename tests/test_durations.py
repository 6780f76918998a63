"""One formatter of durations (tpujob/durations.py): two parts with zero parts kept, one unit for
a table's age, no seconds after minutes for an estimate."""

from __future__ import annotations

import pytest

from tpujob.durations import duration_text


@pytest.mark.parametrize(("seconds", "two", "one", "estimate"), [
    (0, "0s", "0s", "0s"),
    (45, "45s", "45s", "45s"),
    (60, "1m00s", "1m", "1m"),
    (297, "4m57s", "4m", "4m"),
    (3600, "1h00m", "1h", "1h00m"),
    (6366.7, "1h46m", "1h", "1h46m"),
    (129600, "1d12h", "1d", "1d12h"),
    (-3, "0s", "0s", "0s"),
])
def test_the_same_span_in_each_display(seconds, two, one, estimate):
    assert duration_text(seconds) == two
    assert duration_text(seconds, parts=1) == one
    assert duration_text(seconds, finest="m") == estimate
