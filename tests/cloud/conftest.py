"""The cloud layer against the emulator, started in this process on a free port."""

from __future__ import annotations

import pytest


@pytest.fixture
def cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05,
                                 poll_interval=0.01)
