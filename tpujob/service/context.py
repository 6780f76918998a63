"""What every use case needs: the settings, the store, an identity for leases."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Iterator

from tpujob import settings as settings_mod
from tpujob.errors import JobLocked
from tpujob.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from tpujob.store.repository import Store


@dataclass
class Context:
    settings: Settings

    @classmethod
    def load(cls) -> Context:
        return cls(settings_mod.load())

    @cached_property
    def engine(self) -> Engine:
        """The store's engine alone: what a command that only reads rows (`list`) needs,
        without the ORM the Store imports."""
        from tpujob.store.db import engine_for

        return engine_for(self.settings.database_url)

    @cached_property
    def store(self) -> Store:
        from tpujob.store.repository import open_store

        return open_store(self.settings.database_url)

    @cached_property
    def default_project(self) -> str:
        """The project of a spec without tpu.project: the `project` setting, else, on gcp, the
        one Application Default Credentials carry (`gcloud config set project`, a key file's)."""
        if self.settings.effective_project or self.settings.cloud != "gcp":
            return self.settings.effective_project
        from tpujob.clients import adc_project

        return adc_project()

    @cached_property
    def actor(self) -> str:
        """Who holds a lease: unique per process, readable in `show`."""
        return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    @contextlib.contextmanager
    def lease(self, job_id: int, ttl_seconds: float = 120.0, wait_seconds: float = 10.0) -> Iterator[str]:
        """Hold the job's lease for the block; waits briefly for another actor to finish."""
        deadline = time.monotonic() + wait_seconds
        with contextlib.ExitStack() as held:
            while True:
                try:
                    held.enter_context(self.store.lease(job_id, self.actor, ttl_seconds))
                    break
                except JobLocked:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)
            yield self.actor
