"""Rendering of jobs for people (tables) and for programs (--json)."""

from __future__ import annotations

import json
import time
from datetime import date
from json.encoder import encode_basestring_ascii as _json_str  # json.dumps' own C string encoder

import typer

from tpujob.durations import duration_text
from tpujob.names import attempt_nodes

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_dates: dict[int, str] = {}  # days since the epoch -> ISO date: a store's jobs share few days


def iso(ts: float | None) -> str | None:
    """`datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")`, to the byte (a
    test compares them), at a third of its cost: `list --all --json` formats four timestamps for
    each of 10,000 jobs, which took longer than reading the jobs."""
    if ts is None:
        return None
    second = int(ts)
    if ts - second >= 0.9999995:  # fromtimestamp rounds to the microsecond before the seconds
        second += 1
    day, second = divmod(second, 86400)
    day_text = _dates.get(day)
    if day_text is None:
        day_text = _dates[day] = date.fromordinal(_EPOCH_ORDINAL + day).isoformat()
    return f"{day_text}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}+00:00"


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return duration_text((now or time.time()) - ts, parts=1)  # one unit: a table's column


# A job's fields as `show --json` and `list --json` print them, in this order.
JOB_KEYS = ("id", "name", "state", "end_reason", "owner", "from_node", "accelerator", "zone", "project",
            "cloud", "attempt",
            "preemptions", "failures", "nan_restarts", "host0_ip", "created_at", "updated_at",
            "ended_at", "observed_at", "goodput", "step", "total_steps", "priority", "waiting_for")


def job_dict(job, current=None) -> dict:
    """`current`: the job's current attempt, whose step it shows (a `list` row carries its own)."""
    from tpujob.names import format_job_id
    from tpujob.service.accounting import goodput

    step_of = current if current is not None else job
    return dict(zip(JOB_KEYS, (
        format_job_id(job.id), job.name, job.state, job.end_reason, job.owner, job.from_node,
        job.accelerator, job.zone, job.project,
        job.cloud, job.attempt, job.preemptions, job.failures, job.nan_restarts, job.host0_ip,
        iso(job.created_at), iso(job.updated_at), iso(job.ended_at), iso(job.observed_at),
        round(goodput(job, time.time()), 4), getattr(step_of, "last_step", None),
        getattr(step_of, "total_steps", None), job.priority, job.waiting_for)))


# `list --json`'s text of one job: job_dict as print_json indents it, key for key (a test keeps
# the two equal). One format string per job: building 10,000 dicts for the pure-Python indenting
# encoder cost `list --all --json` more than the rest of its work.
_JOB_JSON = "  {\n" + ",\n".join(f'    "{key}": %s' for key in JOB_KEYS) + "\n  }"


def _json_time(ts: float | None) -> str:
    return "null" if ts is None else f'"{iso(ts)}"'


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(value)


def _json_or_null(text: str | None) -> str:
    return "null" if text is None else _json_str(text)


def print_jobs_json(jobs: list) -> None:
    """print_json([job_dict(job) for job in jobs]), to the byte."""
    from tpujob.names import format_job_id
    from tpujob.service.accounting import goodput

    if not jobs:
        typer.echo("[]")
        return
    now = time.time()
    typer.echo("[\n" + ",\n".join(_JOB_JSON % (
        f'"{format_job_id(j.id)}"', _json_str(j.name), _json_str(j.state), _json_or_null(j.end_reason),
        _json_or_null(j.owner), _json_or_null(j.from_node),
        _json_str(j.accelerator), _json_str(j.zone), _json_str(j.project), _json_str(j.cloud),
        j.attempt, j.preemptions, j.failures, j.nan_restarts, _json_or_null(j.host0_ip),
        _json_time(j.created_at), _json_time(j.updated_at), _json_time(j.ended_at), _json_time(j.observed_at),
        repr(round(goodput(j, now), 4)), _json_int(j.last_step), _json_int(j.total_steps),
        _json_str(j.priority), _json_or_null(j.waiting_for)) for j in jobs) + "\n]")


def waiting_cell(reason: str | None) -> str:
    """`list`'s WAITING-FOR: the reason without who holds the chips ("quota: 64/64 v5e chips in
    us-west4, 3rd in band normal"); `show` and `tpujob queue` print it whole."""
    if not reason:
        return "-"
    head, _, rest = reason.partition("; ")
    return ", ".join([head.split(" held by ")[0], *rest.split("; ")[:1]]) if rest else head.split(" held by ")[0]


def attempt_dict(a) -> dict:
    return {"number": a.number, "slice_name": a.slice_name, "slices": a.slices,
            "nodes": attempt_nodes(a), "zone": a.zone, "accelerator": a.accelerator,
            "queued": a.queued, "started_at": iso(a.started_at), "ended_at": iso(a.ended_at),
            "end_reason": a.end_reason, "last_step": a.last_step, "total_steps": a.total_steps,
            "resumed_from_step": a.resumed_from_step, "cause": a.cause,
            "lost_slices": [int(k) for k in a.lost_slices.split(",")] if a.lost_slices else []}


def event_dict(e) -> dict:
    return {"at": iso(e.at), "kind": e.kind, "from_state": e.from_state, "to_state": e.to_state,
            "message": e.message}


def print_json(data) -> None:
    typer.echo(json.dumps(data, indent=2))


def table(headers: list[str], rows: list[list]) -> str:
    """Left-aligned columns two spaces apart; each cell as str() shows it.

    Column by column and through one format string per line: cell by cell, `list --all` spent
    more time here on 10,000 jobs than reading them from the store.
    """
    columns = zip(*rows) if rows else [()] * len(headers)
    widths = [max(len(h), max(map(len, map(str, column)), default=0)) for h, column in zip(headers, columns)]
    line = "  ".join(f"%-{w}s" for w in widths)
    return "\n".join([(line % tuple(headers)).rstrip(), *[(line % tuple(row)).rstrip() for row in rows]])
