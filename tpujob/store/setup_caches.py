"""The setup cache's digests (migration 16): the sha256 of each archive, by run dir bucket and
cache key, recorded from host 0's report when it stored it, read before a later setup so that
its hosts unpack only that archive (attempt.setup_cache, templates/setup.sh)."""

from __future__ import annotations

from sqlalchemy import and_, delete
from sqlmodel import col

from tpujob.store.models import SetupCache
from tpujob.store.transactions import Transactions


class SetupCaches(Transactions):
    """The setup cache operations of Store."""

    def setup_cache_digest(self, bucket: str, cache_key: str) -> str | None:
        """The sha256 recorded for the archive of `cache_key` in `bucket`; None: none is."""
        with self._read() as session:
            row = session.get(SetupCache, (bucket, cache_key))
            return row.sha256 if row is not None else None

    def record_setup_cache_digest(self, bucket: str, cache_key: str, sha256: str) -> None:
        """Record (or replace: host 0 stored a new one in place of a refused archive) it."""
        with self._tx() as session:
            session.merge(SetupCache(bucket=bucket, cache_key=cache_key, sha256=sha256, recorded_at=self.clock()))

    def forget_setup_cache_digest(self, bucket: str, cache_key: str) -> None:
        """The archive was deleted (`tpujob cache clear`): its digest goes with it."""
        with self._tx() as session:
            session.exec(delete(SetupCache).where(and_(
                col(SetupCache.bucket) == bucket, col(SetupCache.cache_key) == cache_key)))
