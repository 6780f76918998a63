"""checkpoint_every: fixed steps, or auto: Young's interval for the measured save and M."""

from __future__ import annotations

import math

import pytest

from tpujob.runtime.config import ConfigError, config_from_dict
from tpujob.runtime.spacing import DEFAULT_MTBI_S, MAX_INTERVAL_S, MIN_INTERVAL_S, Spacing, young_seconds


@pytest.mark.parametrize("every, mtbi, saves, step, since, due", [
    (10, None, [], 20, 0.0, True),  # fixed: every 10th step, whatever the time
    (10, None, [], 21, 1e9, False),
    (None, 3600.0, [], 5, MIN_INTERVAL_S - 1, False),  # auto, C not measured yet: the floor
    (None, 3600.0, [], 5, MIN_INTERVAL_S, True),
    (None, 3600.0, [50.0], 5, 599.0, False),  # sqrt(2 * 50 * 3600) = 600 s
    (None, 3600.0, [50.0], 5, 600.0, True),
    (None, None, [30.0], 5, math.sqrt(2 * 30 * DEFAULT_MTBI_S), True),  # no M handed: a day
    (None, 1e9, [600.0], 5, MAX_INTERVAL_S - 1, False),  # bounded above
])
def test_spacing(every, mtbi, saves, step, since, due):
    spacing = Spacing(every, mtbi)
    for stall in saves:
        spacing.saved(stall)
    assert spacing.due(step, since) is due


def test_the_interval_follows_the_newest_save():
    spacing = Spacing(None, 7200.0)
    spacing.saved(10.0)
    spacing.saved(90.0)
    assert spacing.interval == pytest.approx(young_seconds(90.0, 7200.0)) == pytest.approx(math.sqrt(2 * 90 * 7200))


@pytest.mark.parametrize("value, ok", [("auto", True), (50, True), ("sometimes", False), (0, False), (True, False)])
def test_checkpoint_every_takes_steps_or_auto(value, ok):
    if ok:
        assert config_from_dict({"checkpoint_every": value}).checkpoint_every == value
    else:
        with pytest.raises(ConfigError, match="checkpoint_every"):
            config_from_dict({"checkpoint_every": value})
