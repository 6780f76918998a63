"""This node's own clock: the wall clock, or in tests the wall clock off by the knob
TPUJOB_CLOCK_SKEW_SECONDS (tpujob/settings.py), as a lab node's wrong clock would be (the lab
tests give each node its own). tpujob judges no age on it alone: the store's clock corrects it by the
store server's offset (store/clock.py), a run dir's heartbeat by the storage service's
(cloud/gcs.py `Gcs.now`)."""

from __future__ import annotations

import time

from tpujob.settings import knob


def node_time() -> float:
    """This node's own clock (the wall clock, plus TPUJOB_CLOCK_SKEW_SECONDS in tests)."""
    return time.time() + skew_seconds()


def skew_seconds() -> float:
    """TPUJOB_CLOCK_SKEW_SECONDS, a knob of tpujob/settings.py (tests only)."""
    return knob("CLOCK_SKEW_SECONDS")


def date_header_offset(date: str | None, before: float, after: float) -> float | None:
    """A server's clock minus this node's, from the `Date` header of an answer asked for at
    `before` and received at `after` (node_time): HTTP dates are whole seconds, cut (RFC 9110
    section 5.6.7), so the server's time is taken half a second on. None without a readable
    date."""
    import email.utils

    try:
        theirs = email.utils.parsedate_to_datetime(date or "").timestamp() + 0.5
    except (TypeError, ValueError):
        return None
    return theirs - (before + after) / 2
