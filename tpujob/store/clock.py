"""The store's clock: the time every node of a lab writes into the store and judges ages by.

A lab's nodes share one PostgreSQL server and disagree by minutes (a login node without NTP, a
laptop). A lease one node writes as "expires at T" and another judges against its own clock
would be stolen early or kept late; a state's age (backoff, setup and provisioning timeouts, the
unhealthy grace) would be judged differently by each node. So a node's timestamps are its own
clock corrected by its offset from the store server's clock (`SELECT clock_timestamp()`),
measured once per process and again every REMEASURE_SECONDS: every node writes, and measures
ages, in the server's time. SQLite is one file on one machine: its clock is the node's.

A heartbeat in a run dir on GCS carries the storage service's time (the object's `updated`):
its age is judged on that service's clock (cloud/gcs.py `Gcs.now`), never the node's.
This node's own clock, and the tests' TPUJOB_CLOCK_SKEW_SECONDS: tpujob/clocks.py.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import text
from sqlalchemy.engine import Engine

from tpujob.clocks import node_time

REMEASURE_SECONDS = 600.0  # a long `watch` follows a node clock that NTP steps meanwhile


def server_offset(engine: Engine) -> float:
    """The store server's clock minus this node's, in seconds (0 for SQLite): the server's
    time read between two readings of the node's, against their midpoint."""
    if engine.dialect.name != "postgresql":
        return 0.0
    with engine.connect() as conn:
        before = node_time()
        server = float(conn.execute(text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar_one())
        after = node_time()
    return server - (before + after) / 2


class StoreClock:
    """`Store(engine, clock=StoreClock(engine))`: the node's time plus its offset from the
    store server, the offset measured on first use and every REMEASURE_SECONDS."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._offset: float | None = None
        self._measured = 0.0  # time.monotonic() of the last measure
        self._lock = threading.Lock()

    @property
    def offset(self) -> float:
        with self._lock:
            if self._offset is None or time.monotonic() - self._measured > REMEASURE_SECONDS:
                self._offset = server_offset(self.engine)
                self._measured = time.monotonic()
            return self._offset

    def __call__(self) -> float:
        offset = self.offset
        return node_time() + offset
