"""`tpujob report` (where the lab's wall time and dollars went) and `tpujob zones` (where an
accelerator has done best): thin over service/goodput.py."""

from __future__ import annotations

import typer

from tpujob.cli import render


def register(app: typer.Typer) -> None:
    @app.command()
    def report(since: str = typer.Option("7d", "--since", help="How far back: a duration like 7d, 12h, 90m."),
               by: str = typer.Option("user", "--by", help="Group by user, zone or accelerator."),
               json_out: bool = typer.Option(False, "--json")):
        """The ledgers of the jobs alive in the window, added up per group: seconds and dollars
        per bucket, and the training hours each dollar bought."""
        from tpujob.durations import duration_text
        from tpujob.errors import UsageError
        from tpujob.service import goodput
        from tpujob.service.context import Context
        from tpujob.spec.models import duration_seconds

        try:
            window = duration_seconds(since)
        except ValueError as exc:
            raise UsageError(f"--since {since!r}: {exc}") from None
        rows = goodput.report(Context.load(), window, by)
        if json_out:
            render.print_json({"since_seconds": window, "by": by, "rows": [r.to_json() for r in rows]})
            return
        if not rows:
            typer.echo(f"no jobs in the last {duration_text(window)}")
            return
        shown = [b for b in goodput.BUCKETS if any(r.buckets.get(b) for r in rows)]
        headers = [by.upper(), "JOBS", "WALL", *[b.upper() for b in shown], "USD", "TRAIN-H/USD"]
        body = [[r.key, r.jobs, duration_text(r.wall_seconds),
                 *[duration_text(r.buckets[b]) for b in shown],
                 "-" if r.total_dollars is None else f"{r.total_dollars:.2f}",
                 "-" if r.training_per_dollar is None else f"{r.training_per_dollar:.3f}"] for r in rows]
        typer.echo(render.table(headers, body))

    @app.command()
    def zones(accelerator: str = typer.Argument(..., help="An accelerator type, e.g. v5litepod-8."),
              provisioning: str = typer.Option("spot", "--provisioning", help="spot, on-demand or preemptible."),
              json_out: bool = typer.Option(False, "--json")):
        """The zones offering ACCELERATOR, best first by expected goodput per dollar from this
        store's history (the whole lab's on a shared store), with the evidence behind each."""
        from tpujob.durations import duration_text
        from tpujob.service import goodput
        from tpujob.service.context import Context

        ranked = goodput.zones(Context.load(), accelerator, provisioning)
        if json_out:
            render.print_json([{"zone": z, "training_seconds_per_dollar": c.score,
                                "mtbi_seconds": round(c.mtbi, 1),
                                "expected_wait_seconds": c.evidence.expected_wait,
                                "requests": c.evidence.requests, "got_capacity": c.evidence.capacity,
                                "ran_seconds": round(c.evidence.ran, 1), "runs": c.evidence.runs,
                                "interruptions": c.evidence.interruptions} for z, c in ranked])
            return
        headers = ["ZONE", "TRAIN-S/USD", "MTBI", "WAIT", "REQUESTS", "GOT", "RAN", "INTERRUPTIONS"]
        body = [[z, "-" if c.score is None else f"{c.score:.0f}", duration_text(c.mtbi),
                 "-" if c.evidence.expected_wait is None else duration_text(c.evidence.expected_wait),
                 c.evidence.requests, c.evidence.capacity, duration_text(c.evidence.ran), c.evidence.interruptions]
                for z, c in ranked]
        typer.echo(render.table(headers, body))
        if not any(c.evidence.requests for _, c in ranked):
            typer.echo("no history yet: every zone at the prior (a cold start keeps the spec's order)")
