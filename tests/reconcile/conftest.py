"""Fixtures of the reconciler's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def store(tmp_path):
    from tpujob.store.repository import open_store

    return open_store(f"sqlite:///{tmp_path / 'tpujob.db'}")
