"""Training curves: the run dir's metrics.jsonl (host 0 appends one JSON object per `log_every`
steps: docs/runtime.md), each point tagged with the attempt whose time it falls in, so a
reader sees where a resumed attempt picked up."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tpujob.runtime.contract import METRICS_FILE
from tpujob.service.timeline import attempt_at

# What the dashboard draws, by metrics.jsonl key, with its label.
SERIES = (("loss", "loss"), ("tokens_per_s", "tokens/s"), ("mfu", "MFU"))
# The tail read from GCS: about 40,000 lines, days of a run logged every 10 steps.
MAX_BYTES = 8 << 20


@dataclass(frozen=True)
class Point:
    attempt: int | None
    step: int
    time: float
    values: dict  # key of SERIES -> float, or None where the runtime did not know it (mfu on cpu)


@dataclass
class Curves:
    points: list[Point] = field(default_factory=list)
    source: str = ""  # where they were read: gs://.../metrics.jsonl
    error: str = ""  # why there are none to show
    skipped: int = 0  # lines that were not a metrics record (a line cut by the tail, a crash)

    def resumes(self) -> list[Point]:
        """The first point of each attempt after the first one that logged: where it resumed."""
        firsts, seen = [], set()
        for point in self.points:
            if point.attempt not in seen:
                seen.add(point.attempt)
                firsts.append(point)
        return firsts[1:]


def parse(text: str, bars) -> Curves:
    """metrics.jsonl's lines -> points in file order; what is not a record is counted, not fatal."""
    curves = Curves()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, at = int(record["step"]), float(record["time"])
        except (ValueError, KeyError, TypeError):
            curves.skipped += 1
            continue
        values = {key: _number(record.get(key)) for key, _ in SERIES}
        curves.points.append(Point(attempt_at(bars, at), step, at, values))
    return curves


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read(ctx, spec, job_id: int, bars) -> Curves:
    """The job's curves from its gs:// run dir. A host-local run dir is not read: it lives on
    host 0 only and goes with the slice at a preemption, so it never holds a run's whole story."""
    from tpujob.attempt.run_dirs import run_dir_location

    location = run_dir_location(spec, job_id)
    if location is None:
        return Curves(error="no curves: the run dir is on host 0 (set run_dir: gs://... in the spec "
                            "to keep metrics across attempts)")
    bucket, prefix = location
    name = f"{prefix}/{METRICS_FILE}"
    source = f"gs://{bucket}/{name}"
    from tpujob.clients import make_storage
    from tpujob.cloud.gcs import Gcs
    from tpujob.errors import TpujobError

    try:
        found = Gcs(make_storage(ctx.settings, start_emulator=False)).read_tail(bucket, name, MAX_BYTES)
    except TpujobError as exc:
        return Curves(source=source, error=exc.message)
    if found is None:
        return Curves(source=source, error=f"no {source} yet (host 0 writes it every log_every steps)")
    raw, cut = found
    text = raw.decode(errors="replace")
    if cut:  # the read began mid-line
        text = text.split("\n", 1)[-1]
    curves = parse(text, bars)
    curves.source = source
    return curves
