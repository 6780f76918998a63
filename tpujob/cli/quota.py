"""`tpujob quota set|unset|list|weight` and `tpujob queue`: the lab's scheduler (docs/scheduler.md)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    quota = typer.Typer(help="The lab's caps on chips held at once, and each user's fair share.",
                        no_args_is_help=True)

    @quota.command("set")
    def set_(family: str = typer.Argument(..., help="TPU family: v4, v5e, v5p, v6e, tpu7x."),
             chips: int = typer.Argument(..., help="Chips the lab's jobs may hold at once."),
             region: str | None = typer.Option(None, "--region", help="Only in this region (default: all)."),
             provisioning: str | None = typer.Option(None, "--provisioning",
                                                     help="Only spot or on-demand (default: both).")) -> None:
        """Cap the chips a family's jobs hold at once; a job over it waits QUEUED, never sent to Google."""
        from tpujob.service import quotas
        from tpujob.service.context import Context

        q = quotas.set_quota(Context.load(), family, chips, region=region, provisioning=provisioning)
        typer.echo(f"quota {q.family}" + (f" in {q.region}" if q.region else "")
                   + (f" ({q.provisioning})" if q.provisioning else "") + f": {q.chips} chips")

    @quota.command("unset")
    def unset(family: str = typer.Argument(...),
              region: str | None = typer.Option(None, "--region"),
              provisioning: str | None = typer.Option(None, "--provisioning")) -> None:
        """Remove a cap (its jobs are admitted at the next sweep)."""
        from tpujob.service import quotas
        from tpujob.service.context import Context

        quotas.unset_quota(Context.load(), family, region=region, provisioning=provisioning)
        typer.echo(f"quota {family} removed")

    @quota.command("list")
    def list_(json_out: bool = typer.Option(False, "--json")) -> None:
        """The caps, the chips held under each now, and the users' weights."""
        from tpujob.cli import render
        from tpujob.service import quotas
        from tpujob.service.context import Context

        ctx = Context.load()
        rows, weights = quotas.list_quotas(ctx), quotas.weights(ctx)
        if json_out:
            render.print_json({"quotas": [{"family": q.family, "region": q.region or None,
                                           "provisioning": q.provisioning or None, "chips": q.chips,
                                           "held": held} for q, held in rows],
                               "weights": weights})
            return
        typer.echo(render.table(["FAMILY", "REGION", "PROVISIONING", "CHIPS", "HELD"],
                                [[q.family, q.region or "*", q.provisioning or "*", q.chips, held]
                                 for q, held in rows]))
        if weights:
            typer.echo("\n" + render.table(["USER", "WEIGHT"], [[u, f"{w:g}"] for u, w in sorted(weights.items())]))

    @quota.command("weight")
    def weight(user: str = typer.Argument(..., help="The owner, as `list` shows it."),
               value: float = typer.Argument(..., help="Fair-share weight (default 1; 2: twice the share).")) -> None:
        """Set a user's fair-share weight."""
        from tpujob.service import quotas
        from tpujob.service.context import Context

        quotas.set_weight(Context.load(), user, value)
        typer.echo(f"weight of {user.strip()}: {value:g}")

    app.add_typer(quota, name="quota")

    @app.command("queue")
    def queue(json_out: bool = typer.Option(False, "--json")) -> None:
        """The lab's QUEUED jobs in the order the sweep admits them, and why each waits."""
        from tpujob.cli import render
        from tpujob.names import format_job_id
        from tpujob.service import quotas
        from tpujob.service.context import Context

        rows = quotas.queue(Context.load())
        if json_out:
            render.print_json([{"position": r.position, "id": format_job_id(r.job.id), "name": r.job.name,
                                "owner": r.job.owner, "priority": r.job.priority, "chips": r.chips,
                                "share": round(r.share, 3), "waiting_for": r.reason or None,
                                "starts_in_seconds": None if r.starts_in is None else round(r.starts_in),
                                "starts": r.starts}
                               for r in rows])
            return
        typer.echo(render.table(["#", "ID", "NAME", "OWNER", "BAND", "CHIPS", "SHARE", "STARTS", "WAITING-FOR"],
                                [["-" if r.position is None else r.position, format_job_id(r.job.id), r.job.name,
                                  r.job.owner or "-",
                                  r.job.priority, r.chips, f"{r.share:.1f}",
                                  "?" if r.starts_in is None else r.starts,  # --json's `starts` says why
                                  r.reason or "admitted at the next sweep"] for r in rows]))

    budget = typer.Typer(help="Each user's spending cap per day, week or month.", no_args_is_help=True)

    @budget.command("set")
    def budget_set(user: str = typer.Argument(..., help="The owner, as `list` shows it."),
                   dollars: float = typer.Argument(..., help="Dollars per period, at the prices tpujob shows."),
                   per: str = typer.Option(..., "--per", help="day, week or month (UTC).")) -> None:
        """Cap a user's spending: reached, their jobs stop with a checkpoint (FAILED budget)."""
        from tpujob.service import quotas
        from tpujob.service.context import Context

        quotas.set_budget(Context.load(), user, dollars, per)
        typer.echo(f"budget of {user.strip()}: ${dollars:.2f} per {per}")

    @budget.command("list")
    def budget_list(json_out: bool = typer.Option(False, "--json")) -> None:
        """The budgets and what each user spent this period."""
        from tpujob.cli import render
        from tpujob.service import quotas
        from tpujob.service.context import Context

        rows = quotas.list_budgets(Context.load())
        if json_out:
            render.print_json([{"user": u, "dollars": d, "per": p, "spent": round(s, 2)} for u, d, p, s in rows])
            return
        typer.echo(render.table(["USER", "BUDGET", "PER", "SPENT"],
                                [[u, f"${d:.2f}", p, f"${s:.2f}"] for u, d, p, s in rows]))

    app.add_typer(budget, name="budget")
