"""Rendering of jobs for people (tables) and for programs (--json)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import typer


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    secs = max(0, int((now or time.time()) - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def job_dict(job) -> dict:
    from tpujob.service.accounting import goodput
    from tpujob.store.ids import format_job_id

    return {
        "id": format_job_id(job.id), "name": job.name, "state": job.state, "end_reason": job.end_reason,
        "accelerator": job.accelerator, "zone": job.zone, "project": job.project, "cloud": job.cloud,
        "attempt": job.attempt, "preemptions": job.preemptions, "failures": job.failures,
        "nan_restarts": job.nan_restarts, "host0_ip": job.host0_ip,
        "created_at": iso(job.created_at), "updated_at": iso(job.updated_at), "ended_at": iso(job.ended_at),
        "observed_at": iso(job.observed_at),
        "goodput": round(goodput(job, time.time()), 4),
    }


def attempt_dict(a) -> dict:
    return {"number": a.number, "slice_name": a.slice_name, "zone": a.zone, "accelerator": a.accelerator,
            "queued": a.queued, "started_at": iso(a.started_at), "ended_at": iso(a.ended_at),
            "end_reason": a.end_reason, "last_step": a.last_step, "resumed_from_step": a.resumed_from_step}


def event_dict(e) -> dict:
    return {"at": iso(e.at), "kind": e.kind, "from_state": e.from_state, "to_state": e.to_state,
            "message": e.message}


def print_json(data) -> None:
    typer.echo(json.dumps(data, indent=2))


def print_json_rows(rows: list[dict]) -> None:
    """print_json for a list of flat dicts (scalar values), `list --json`'s shape, to the byte.

    json falls back to its pure-Python encoder whenever `indent` is set, which took longer than
    everything else `list --all --json` does on 10,000 jobs. Each row goes through the C encoder
    instead, its item separator carrying the newline and indent; this is exact because a string
    value's own newlines come out escaped.
    """
    if not rows:
        typer.echo("[]")
        return
    encode = json.JSONEncoder(separators=(",\n    ", ": ")).encode
    typer.echo("[\n" + ",\n".join(f"  {{\n    {encode(row)[1:-1]}\n  }}" if row else "  {}" for row in rows)
               + "\n]")


def table(headers: list[str], rows: list[list]) -> str:
    """Left-aligned columns two spaces apart; each cell as str() shows it.

    Column by column and through one format string per line: cell by cell, `list --all` spent
    more time here on 10,000 jobs than reading them from the store.
    """
    columns = zip(*rows) if rows else [()] * len(headers)
    widths = [max(len(h), max(map(len, map(str, column)), default=0)) for h, column in zip(headers, columns)]
    line = "  ".join(f"%-{w}s" for w in widths)
    return "\n".join([(line % tuple(headers)).rstrip(), *[(line % tuple(row)).rstrip() for row in rows]])
