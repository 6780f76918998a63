"""What `list` shows of each job: the columns it renders as plain tuples, no ORM objects (a
store keeps thousands of jobs, and this module imports neither sqlmodel nor the models)."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import and_, column, select, table
from sqlalchemy.engine import Engine

from tpujob.store.reads import fetch_all
from tpujob.store.states import ENDED


class JobSummary(NamedTuple):
    """A job row's listed columns, named and typed as on models.Job (accounting.goodput reads it
    too). Listed again, not derived: this module must not import the ORM; a test
    (tests/service/test_listing.py) keeps them the model's."""

    id: int
    name: str
    state: str
    end_reason: str | None
    accelerator: str
    zone: str
    project: str
    cloud: str
    attempt: int
    preemptions: int
    failures: int
    nan_restarts: int
    host0_ip: str | None
    created_at: float
    updated_at: float
    ended_at: float | None
    observed_at: float | None
    state_since: float | None
    running_seconds: float
    owner: str | None = None  # None: a job recorded before owners were (migration 17)
    from_node: str | None = None
    priority: str = "normal"  # the lab scheduler's band (migration 19)
    waiting_for: str | None = None  # QUEUED: why, in words
    last_step: int | None = None    # the current attempt's (attempt.last_step, total_steps)
    total_steps: int | None = None
    slices: int | None = None  # the current attempt's (multislice); None before the first



_ATTEMPT_FIELDS = ("last_step", "total_steps", "slices")
_job = table("job", *(column(name) for name in JobSummary._fields if name not in _ATTEMPT_FIELDS))
_attempt = table("attempt", column("job_id"), column("number"), *(column(name) for name in _ATTEMPT_FIELDS))


def list_summaries(engine: Engine, include_ended: bool = False, owner: str | None = None) -> list[JobSummary]:
    """Every job (active ones unless `include_ended`; only `owner`'s when given), oldest first."""
    current = and_(_attempt.c.job_id == _job.c.id, _attempt.c.number == _job.c.attempt)
    query = (select(*_job.c, *(_attempt.c[name] for name in _ATTEMPT_FIELDS))
             .select_from(_job.outerjoin(_attempt, current)).order_by(_job.c.id))
    if not include_ended:
        query = query.where(_job.c.state.not_in(sorted(s.value for s in ENDED)))
    if owner is not None:
        query = query.where(_job.c.owner == owner)
    return list(map(JobSummary._make, fetch_all(engine, query)))
