"""What `list` shows of each job: the columns it renders as plain tuples, no ORM objects (a
store keeps thousands of jobs, and this module imports neither sqlmodel nor the models)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from sqlalchemy import column, select, table
from sqlalchemy.engine import Engine

from tpujob.store.reads import fetch_all
from tpujob.store.states import ENDED


class JobSummary(NamedTuple):
    """A job row's listed columns, named as on models.Job (accounting.goodput reads it too)."""

    id: int
    name: str
    state: str
    end_reason: Optional[str]
    accelerator: str
    zone: str
    project: str
    cloud: str
    attempt: int
    preemptions: int
    failures: int
    nan_restarts: int
    host0_ip: Optional[str]
    created_at: float
    updated_at: float
    ended_at: Optional[float]
    observed_at: Optional[float]
    state_since: Optional[float]
    running_seconds: float


_job = table("job", *(column(name) for name in JobSummary._fields))


def list_summaries(engine: Engine, include_ended: bool = False) -> list[JobSummary]:
    """Every job (active ones unless `include_ended`), oldest first."""
    query = select(*_job.c).order_by(_job.c.id)
    if not include_ended:
        query = query.where(_job.c.state.not_in(sorted(s.value for s in ENDED)))
    return list(map(JobSummary._make, fetch_all(engine, query)))
