"""The suite's own scheduling: tests marked `xdist_group` share a worker under `--dist loadgroup`
(.ci/run's), so those that share a machine-wide resource (the quick start's `tpujob ui` port)
never run side by side. xdist carries the group in the test's node id; a pytest whose node ids
drop it (9.2 with xdist 3.8: pytest-dev/pytest-xdist#1386) scatters them silently."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("suite-groups")
def test_a_grouped_test_carries_its_group_to_the_scheduler(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under xdist's --dist loadgroup")  # a plain run has no workers to share
    assert request.node.nodeid.endswith("@suite-groups"), request.node.nodeid
