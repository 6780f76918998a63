"""Identifiers derived from a job's id: pure, no database import (`list` renders them)."""

from __future__ import annotations


def format_job_id(job_id: int) -> str:
    return f"{job_id:06d}"


def slice_name(job_id: int, attempt: int) -> str:
    """Derived, never random: a retried create of the same attempt finds and adopts its slice."""
    return f"tpujob-{format_job_id(job_id)}-{attempt}"
