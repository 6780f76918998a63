"""The store's own id (migration 8): the value of the `tpujob-store` label on every cloud
resource this store's jobs create."""

from __future__ import annotations

from sqlalchemy import Column, MetaData, String, Table, select
from sqlalchemy.engine import Engine

from tpujob.store.reads import fetch_all

_store_info = Table("store_info", MetaData(), Column("id", String, primary_key=True))


def store_id(engine: Engine) -> str:
    """The id made once by migration 8 (a read without the write lock)."""
    found: str = fetch_all(engine, select(_store_info.c.id))[0][0]
    return found
