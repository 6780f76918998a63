"""`list`: the jobs' summary rows. Kept apart from jobs.py, whose imports (the spec's pydantic
models, the ORM) would cost `list` more than reading 10,000 rows does."""

from __future__ import annotations

from tpujob.service.context import Context
from tpujob.store.summaries import JobSummary, list_summaries


def list_jobs(ctx: Context, include_ended: bool = False, owner: str | None = None) -> list[JobSummary]:
    """The jobs' rows; `owner`: only the jobs that user submitted (`list --mine`, `--user`)."""
    return list_summaries(ctx.engine, include_ended=include_ended, owner=owner)
