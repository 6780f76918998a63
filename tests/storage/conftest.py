"""The storage layer against an emulator in this process (TPU + Compute on one port)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def _compute_module():
    from tpujob.cloud import disks  # 2.6 s of imports: once per session

    return disks


@pytest.fixture
def compute(server, _compute_module):
    return _compute_module.GcpCompute.for_emulator(server.url)


@pytest.fixture
def cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05,
                                 poll_interval=0.01)
