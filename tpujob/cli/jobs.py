"""Job commands: validate, create, list, show, cancel, delete, clean."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from typing import TYPE_CHECKING

import typer

from tpujob.cli import context, render
from tpujob.durations import duration_text
from tpujob.errors import UsageError
from tpujob.names import format_job_id, node_names, nodes_text

if TYPE_CHECKING:
    from tpujob.store.models import Event
    from tpujob.store.states import Counter

# The counters `show --json` prints under "accounting" (store/states.py has them all).
_SHOWN_COUNTERS: tuple[Counter, ...] = ("preemptions", "failures", "nan_restarts", "bad_hosts", "hangs")



def _warn_if_nothing_sweeps(job) -> None:
    """The last line of `create`: a job still going with no cron entry and no watch to
    re-queue it after a preemption would end up PREEMPTED for good, silently."""
    from tpujob.service import watchers
    from tpujob.store.states import ENDED, State

    if State(job.state) not in ENDED and not watchers.find().any:
        typer.echo(f"warning: {watchers.nothing_sweeps_message()}", err=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(spec: str | None = typer.Argument(None, help="Job spec (YAML)."),
                 strict: bool = typer.Option(False, "--strict", help="Refuse (exit 2) a placement whose "
                                             "zone does not offer its accelerator in Google's zone table "
                                             "instead of warning."),
                 json_out: bool = typer.Option(False, "--json", help="Print the resolved spec as JSON."),
                 fields: bool = typer.Option(False, "--fields", help="List every field a spec may have: "
                                             "what it takes, its default and what it means (no SPEC).")):
        """Check a job spec and print what it resolves to (hosts, chips, disks, cost)."""
        if fields:
            if spec is not None:
                raise UsageError("--fields lists the spec's fields; give it without a SPEC")
            _print_fields(json_out)
            return
        if spec is None:
            raise UsageError("give a job spec to check (or --fields to list what a spec may say)")
        from tpujob.attempt.logins import opt_out_warnings
        from tpujob.service import jobs

        ctx = context()
        resolved = jobs.validate(ctx, spec)
        _print_warnings(jobs.placement_warnings(resolved, strict=strict) + opt_out_warnings(ctx.settings))
        if json_out:
            render.print_json(resolved.public_dict())
            return
        _print_resolved(resolved)

    @app.command()
    def create(spec: str = typer.Argument(..., help="Job spec (YAML)."),
               dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; record nothing."),
               keep_slice: bool = typer.Option(False, "--keep-slice", help="Keep the slice after success."),
               wait: bool = typer.Option(False, "--wait", help="Follow the job to its end; exit 0 on SUCCEEDED."),
               timeout: float = typer.Option(3600.0, help="Seconds to follow before returning."),
               strict: bool = typer.Option(False, "--strict", help="Warnings that would waste quota become "
                                           "errors: refuse the job on an error-level lint finding in its sync "
                                           "directory, a bucket in another region than the slice, or a "
                                           "placement whose zone does not offer its accelerator."),
               json_out: bool = typer.Option(False, "--json")):
        """Record a job, create its slice, set up every host and start the program."""
        from tpujob.attempt.logins import opt_out_warnings
        from tpujob.service import jobs

        ctx = context()
        _print_warnings(opt_out_warnings(ctx.settings))
        if dry_run:
            resolved = jobs.validate(ctx, spec)
            _print_warnings(jobs.placement_warnings(resolved, strict=strict))
            with _lint_shown():
                _print_findings(jobs.lint_sync(resolved, strict=strict))
            jobs.check_existing_disks(ctx, resolved)
            steps = jobs.plan(resolved)  # opens no store: names show its tag SSSSSS
            if json_out:
                render.print_json([{"action": s.action, "resource": s.resource, "detail": s.detail} for s in steps])
                return
            typer.echo(f"cloud: {ctx.settings.cloud} (dry run: nothing recorded, nothing created)")
            for i, step in enumerate(steps, 1):
                typer.echo(f"{i:2}. {step.action:<22} {step.resource:<28} {step.detail}")
            return
        with _lint_shown():
            job, _, findings = jobs.create(ctx, spec, keep_slice=keep_slice, strict=strict,
                                           warn=lambda message: typer.echo(f"warning: {message}", err=True))
        _print_findings(findings)
        jid = render.job_dict(job)["id"]
        if not json_out:
            typer.echo(f"job {jid} ({job.name}) recorded; cloud: {ctx.settings.cloud}")
        job = follow_job(ctx, job.id, wait=wait, timeout=timeout, quiet=json_out)
        if json_out:
            render.print_json(render.job_dict(job))
        else:
            typer.echo(f"job {jid} {job.state}" + (f" ({job.end_reason})" if job.end_reason else ""))
            if job.state == "QUEUED" and job.waiting_for:
                typer.echo(f"waiting for: {job.waiting_for}")
        _warn_if_nothing_sweeps(job)
        raise_unless_succeeded(job, wait)

    @app.command("list")
    def list_(all_: bool = typer.Option(False, "--all", "-a", help="Include ended jobs."),
              mine: bool = typer.Option(False, "--mine", help="Only the jobs this node's user submitted "
                                        "(the `user` setting, else ADC's account, else $USER@host)."),
              user: str = typer.Option("", "--user", help="Only the jobs NAME submitted.", metavar="NAME"),
              json_out: bool = typer.Option(False, "--json")):
        """List jobs (active ones unless --all), with who submitted each (OWNER)."""
        from tpujob.progress import step_text
        from tpujob.service import listing

        ctx = context()
        if mine and user:
            raise UsageError("--mine and --user are one filter each: give one")
        if mine:
            from tpujob.owners import current_user

            user = current_user(ctx.settings)
        rows = listing.list_jobs(ctx, include_ended=all_, owner=user or None)
        if json_out:
            render.print_jobs_json(rows)
            return
        from tpujob.service.accounting import goodput

        now = time.time()
        headers = ["ID", "NAME", "OWNER", "ACCELERATOR", "SLICES", "ZONE", "STATE", "ATTEMPT", "STEP",
                   "PREEMPTIONS", "GOODPUT", "HOST0", "AGE", "SEEN"]
        body = [[format_job_id(j.id), j.name, j.owner or "-", j.accelerator, j.slices or 1, j.zone,
                 j.state + (f" ({j.end_reason})" if j.end_reason else ""), j.attempt,
                 step_text(j.last_step, j.total_steps), j.preemptions,
                 f"{goodput(j, now):.0%}", j.host0_ip or "-", render.age(j.created_at, now),
                 render.age(j.observed_at, now) if j.observed_at else "-"] for j in rows]
        if any(j.waiting_for for j in rows):  # a lab's queue (docs/scheduler.md): why each job waits
            headers.append("WAITING-FOR")
            for row, j in zip(body, rows):
                row.append(render.waiting_cell(j.waiting_for))
        typer.echo(render.table(headers, body))

    @app.command()
    def show(job: str = typer.Argument(..., help="Job id or name."),
             json_out: bool = typer.Option(False, "--json"),
             timeline: bool = typer.Option(False, "--timeline",
                                           help="Draw the attempts as bars over the job's life.")):
        """Show a job: its state, attempts, each host's program (while it runs) and events."""
        from tpujob import progress
        from tpujob.attempt import setup_cache
        from tpujob.service import jobs

        detail = jobs.show(context(), job)
        current = detail.attempts[-1] if detail.attempts else None
        data = render.job_dict(detail.job, current)
        far = progress.of_attempt(current)
        data["progress"] = None if far is None else far.to_json()
        data["attempts"] = [render.attempt_dict(a) for a in detail.attempts]
        cached = setup_cache.per_attempt(detail.attempts, detail.events)  # hit or miss, where one is
        for row in data["attempts"]:
            row["setup_cache"] = cached.get(row["number"])
        data["events"] = [render.event_dict(e) for e in detail.events]
        data["hosts"] = None if detail.hosts is None else [
            {"index": h.index, "ip": h.ip, "program": h.program, "exit_code": h.exit_code,
             "step": h.step, "error": h.error} for h in detail.hosts]
        run = detail.run_dir
        data["run_dir"] = None if run is None else {
            "url": run.url, "state": run.state, "step": run.step, "message": run.message,
            "exit_code": run.exit_code, "heartbeat_age_seconds": None if run.heartbeat_age is None
            else round(run.heartbeat_age, 1), "problem": run.problem or None}
        if detail.run_dir_error:
            data["run_dir_error"] = detail.run_dir_error
        if detail.hosts_error:
            data["hosts_error"] = detail.hosts_error
        data["accounting"] = {**{c: getattr(detail.job, c) for c in _SHOWN_COUNTERS},
                              **dataclasses.asdict(detail.accounting)}
        data["ledger"] = detail.ledger.to_json()
        data["checkpoint_auto"] = _checkpoint_auto(current)
        place = detail.queue  # a QUEUED job's, as `tpujob queue` has it now
        if place is not None:
            data["waiting_for"] = place.waiting_for
        data["queue_position"] = None if place is None else place.position
        data["starts_in_seconds"] = None if place is None or place.starts_in is None else round(place.starts_in)
        data["starts"] = None if place is None else place.starts
        ledgers = dict(detail.attempt_ledgers)
        for row in data["attempts"]:
            row["ledger"] = ledgers[row["number"]].to_json() if row["number"] in ledgers else None
        if timeline:
            from tpujob.cli.timeline import timeline_dict

            data["timeline"] = timeline_dict(detail.timeline)
        if json_out:
            render.print_json(data)
            return
        for key in render.JOB_KEYS[:render.JOB_KEYS.index("created_at") + 1]:  # --json's, in its order
            if data[key] is not None or key == "owner":  # a job from before owners: nobody's, "-"
                typer.echo(f"{key + ':':<14}{'-' if data[key] is None else data[key]}")
        if detail.job.bad_hosts:
            typer.echo(f"{'bad_hosts:':<14}{detail.job.bad_hosts}")
        if detail.job.priority != "normal" or detail.job.evictions:
            typer.echo(f"{'priority:':<14}{detail.job.priority}"
                       + (f" (evicted {detail.job.evictions} time(s))" if detail.job.evictions else ""))
        if data["waiting_for"] and detail.job.state == "QUEUED":
            typer.echo(f"{'waiting for:':<14}{data['waiting_for']}")
        if place is not None:
            typer.echo(f"{'queue:':<14}" + ("held back by a cost cap" if place.position is None
                                            else f"position {place.position} in the lab's queue (tpujob queue)"))
            typer.echo(f"{'starts:':<14}{place.starts}")
        if far is not None and (far.step is not None or detail.job.state == "RUNNING"):
            typer.echo(f"{'progress:':<14}{progress.describe(far)}")
        _print_accounting(detail.job, detail.accounting)
        _print_ledger(detail.ledger)
        if data["checkpoint_auto"]:
            auto = data["checkpoint_auto"]
            said = (f"{duration_text(auto['interval_seconds'])} = sqrt(2 x C {auto['save_seconds']:.1f}s x M "
                    f"{duration_text(auto['mtbi_seconds'])}), bounded" if auto["interval_seconds"] is not None
                    and auto["save_seconds"] is not None else
                    f"not chosen yet (M {duration_text(auto['mtbi_seconds'])}; C is measured at the first save)")
            typer.echo(f"  checkpoint_every auto: {said}")
        if timeline:
            from tpujob.cli.timeline import print_timeline

            typer.echo("")
            print_timeline(detail.timeline)
        if detail.attempts:
            typer.echo("\nattempts:")
            headers = ["#", "SLICE", "ACCELERATOR", "ZONE", "STARTED", "ENDED", "REASON", "STEP"]
            cache_column = any(a["setup_cache"] for a in data["attempts"])  # SETUP: the setup cache's hit or miss
            typer.echo(render.table(headers + (["SETUP"] if cache_column else []),
                                    [[a["number"], _nodes_cell(a), a["accelerator"],
                                      a["zone"], a["started_at"],
                                      a["ended_at"] or "-", a["end_reason"] or "-",
                                      "-" if a["last_step"] is None else a["last_step"]]
                                     + ([a["setup_cache"] or "-"] if cache_column else [])
                                     for a in data["attempts"]]))
            for a in data["attempts"]:
                if a["cause"] and a["end_reason"] != "succeeded":
                    lost = (f" (lost slice {', '.join(map(str, a['lost_slices']))} of {a['slices']})"
                            if a["lost_slices"] else "")
                    typer.echo(f"  #{a['number']} {a['end_reason']}{lost}: {a['cause']}")
        if run is not None:
            said = f"{run.state} at step {run.step}" if run.state else "no status.json yet (running)"
            if run.message:
                said += f": {run.message}"
            beat = "none yet" if run.heartbeat_age is None else f"{duration_text(run.heartbeat_age)} ago"
            typer.echo(f"\nrun dir:      {run.url}\n  status:     {run.problem or said}\n"
                       f"  heartbeat:  {beat}")
        elif detail.run_dir_error:
            typer.echo(f"\nrun dir: not readable: {detail.run_dir_error}")
        if data["hosts"]:
            typer.echo("\nhosts:")
            typer.echo(render.table(["HOST", "IP", "PROGRAM", "EXIT", "STEP", "ERROR"],
                                    [[h["index"], h["ip"], h["program"],
                                      "-" if h["exit_code"] is None else h["exit_code"],
                                      "-" if h["step"] is None else h["step"], h["error"] or "-"]
                                     for h in data["hosts"]]))
        elif detail.hosts_error:
            typer.echo(f"\nhosts: not reachable: {detail.hosts_error}")
        typer.echo("\nevents:")
        for e in data["events"]:
            typer.echo(f"  {e['at']}  {e['kind']:<8} {e['message']}")

    force_option = typer.Option(False, "--force", help="Act on another user's job too (a lab's "
                                "convention against mistakes, not a security boundary).")

    @app.command()
    def cancel(jobs_: list[str] = typer.Argument(..., metavar="JOB...", help="Job ids or names."),
               force: bool = force_option):
        """Stop a job's program on every host; the slice is kept (`resume` starts it again)."""
        from tpujob.service import jobs

        _each(jobs_, functools.partial(jobs.cancel, force=force),
              lambda job: f"job {render.job_dict(job)['id']} {job.state}")

    @app.command()
    def delete(jobs_: list[str] = typer.Argument(..., metavar="JOB...", help="Job ids or names."),
               force: bool = force_option):
        """Stop a job and delete its slice and queued resource; the record stays."""
        from tpujob.service import jobs

        _each(jobs_, functools.partial(jobs.delete, force=force),
              lambda job: f"job {render.job_dict(job)['id']} {job.state}")

    @app.command()
    def clean(jobs_: list[str] = typer.Argument(..., metavar="JOB...", help="Job ids or names."),
              force: bool = force_option):
        """Delete a job, remove its logs, then forget its record."""
        from tpujob.service import jobs

        _each(jobs_, functools.partial(jobs.clean, force=force),
              lambda job_id: f"job {format_job_id(job_id)} cleaned")


def _each(refs: list[str], act, say) -> None:
    """`act(ctx, ref)` for each job named, one line each as it is done (an error stops there)."""
    ctx = context()
    for ref in refs:
        typer.echo(say(act(ctx, ref)))


def _print_findings(findings) -> None:
    """Lint findings on stderr, one `file:line:col RULE message (fix: ...)` line each."""
    if findings:
        from tpujob.lint import render_text

        *lines, summary = render_text(findings).splitlines()
        typer.echo("\n".join(lines + [f"lint: {summary} in the sync directory"]), err=True)


def _print_warnings(messages: list[str]) -> None:
    for message in messages:
        typer.echo(f"warning: {message}", err=True)


@contextlib.contextmanager
def _lint_shown():
    """A --strict refusal shows its findings above the one-line error."""
    from tpujob.lint import LintBlocked

    try:
        yield
    except LintBlocked as exc:
        _print_findings(exc.findings)
        raise


def _print_accounting(job, acc) -> None:
    typer.echo(f"{'seen:':<14}" + (f"{render.age(job.observed_at)} ago (last sweep)" if job.observed_at
                                   else "never (no sweep yet)"))
    typer.echo("\naccounting:")
    typer.echo(f"  {job.preemptions} preemptions, {job.failures} failures, {job.nan_restarts} NaN restarts, "
               f"{job.hangs} hangs")
    typer.echo(f"  running {duration_text(acc.running_seconds)} of {duration_text(acc.wall_seconds)} wall: "
               f"goodput {acc.goodput:.0%}")
    typer.echo("  time in state: " + ", ".join(f"{state} {duration_text(secs)}"
                                                for state, secs in acc.seconds_in_state.items()))
    for lost in acc.lost_steps:
        typer.echo(f"  attempt {lost['attempt']} preempted at step {lost['last_step']}, next resumed from "
                   f"{lost['resumed_from_step']}: {lost['lost_steps']} steps lost")


def _checkpoint_auto(attempt) -> dict | None:
    """`checkpoint_every: auto` of the current attempt: the M tpujob handed it, the C its
    runtime measured and the interval it chose (runtime/spacing.py); None where not auto."""
    from tpujob.runtime.contract import Reported

    got = Reported.parse(attempt.reported) if attempt is not None else None
    if got is None or got.mtbi is None:
        return None
    return {"interval_seconds": got.interval, "save_seconds": got.save, "mtbi_seconds": got.mtbi}


def _print_ledger(led) -> None:
    """Where the wall time and dollars went: the ledger's buckets that hold any time, largest first."""
    parts = []
    for name, secs in sorted(led.buckets.items(), key=lambda kv: -kv[1]):
        if secs > 0:
            usd = led.dollars.get(name)
            parts.append(f"{name} {duration_text(secs)}" + (f" ${usd:.2f}" if usd else ""))
    typer.echo("  ledger: " + (", ".join(parts) or "nothing yet"))
    if led.not_reported:
        typer.echo(f"  not reported by the program: {', '.join(led.not_reported)}")


def follow_job(ctx, job_id: int, *, wait: bool, timeout: float, quiet: bool):
    """Drive the job until it runs (or ends, with --wait), printing its events as they come and,
    on stderr, each host step's progress (never with --json: `quiet`)."""
    import sys

    from tpujob.cli.progress_line import HostProgressLine
    from tpujob.service import keep_alive

    progress = None if quiet else HostProgressLine(sys.stderr, tty=sys.stderr.isatty())

    def on_event(event: Event) -> None:
        if progress is not None and event.kind != "created":  # (None: quiet)
            progress.end_line()
            typer.echo(f"  {(render.iso(event.at) or '')[11:19]}  {event.message}", err=True)

    return keep_alive.follow(ctx, job_id, until_ended=wait, timeout=timeout, on_event=on_event,
                         on_progress=progress)


def raise_unless_succeeded(job, wait: bool) -> None:
    from tpujob.errors import JobDidNotSucceed
    from tpujob.store.states import State

    if wait and job.state != State.SUCCEEDED.value:
        reason = f" ({job.end_reason})" if job.end_reason else ""
        raise JobDidNotSucceed(f"job {format_job_id(job.id)} ended {job.state}{reason}" if job.ended_at
                               else f"job {format_job_id(job.id)} still {job.state} after the timeout")


def _cost_line(r) -> str:
    """The estimate at the spec's provisioning; a spot job without a published spot price says
    so instead of showing the on-demand price as if it were the spot one."""
    provisioning = r.spec.tpu.provisioning
    on_demand = r.on_demand_cost_per_hour_usd
    list_price = f"on-demand list price ${on_demand:.2f}/h" if on_demand is not None else "on-demand price unknown"
    if provisioning == "on-demand":
        return f"${on_demand:.2f}/h (on-demand list price)" if on_demand is not None else "unknown"
    if r.cost_per_hour_usd is None:
        if provisioning == "flex-start":
            return f"unknown: flex-start is billed at Dynamic Workload Scheduler prices, below on-demand ({list_price})"
        if provisioning == "reservation":
            return f"unknown: billed through the reservation's commitment ({list_price})"
        return f"unknown: no published {provisioning} price for {r.generation} ({list_price})"
    return f"${r.cost_per_hour_usd:.2f}/h ({provisioning} price; {list_price})"


def _compute_line(r) -> str:
    """What a Compute Engine job becomes: `4 x ct6e-standard-4t (topology 4x4, workload policy +
    BULK MIG), spot, $X/h`, or `1 x ct6e-standard-8t (instance), ...` for a single host."""
    c = r.compute
    form = f"topology {c.topology}, workload policy + BULK MIG" if c.multi_host else "instance"
    what = r.provisioning
    if r.reservation:
        what += f" {r.reservation}"
    if r.max_run_duration_seconds is not None:
        what += f", at most {duration_text(r.max_run_duration_seconds)}"
    price = f"${r.cost_per_hour_usd:.2f}/h" if r.cost_per_hour_usd is not None else "price unknown"
    return f"{c.hosts} x {c.machine_type} ({form}), {what}, {price}"


def _network_line(net) -> str:
    """Where the hosts sit and how tpujob reaches them: external addresses, or internal ones
    only (then tpujob must run inside the VPC, as gcloud's --internal-ips needs)."""
    where = f"network {net.network or 'default'}, subnetwork {net.subnetwork or 'default'}"
    tags = f", tags {', '.join(net.tags)}" if net.tags else ""
    reach = ("external IPs (SSH over them)" if net.external_ips
             else "internal IPs only (tpujob must run inside the VPC)")
    return f"{reach}; {where}{tags}"


def _nodes_cell(a: dict) -> str:
    """An attempt's nodes: NAME-0..N-1, or an elastic attempt's own list."""
    if a["nodes"] == node_names(a["slice_name"], a["slices"]):
        return nodes_text(a["slice_name"], a["slices"])
    return ",".join(a["nodes"])


def _print_fields(json_out: bool) -> None:
    """`validate --fields`: the spec's fields as the models describe them (spec/reference.py)."""
    import textwrap

    from tpujob.spec import reference

    docs = reference.fields()
    if json_out:
        render.print_json([f.as_dict() for f in docs])
        return
    for f in docs:
        default = {"unset": "", "required": " (required)"}.get(f.default, f" (default {f.default})")
        typer.echo(f"{f.path}: {f.kind}{default}")
        typer.echo(textwrap.fill(f.meaning, width=100, initial_indent="    ", subsequent_indent="    ",
                                 break_on_hyphens=False))


def _print_resolved(r) -> None:
    cost = _cost_line(r)
    lines = [
        ("name", r.spec.name), ("accelerator", f"{r.accelerator} ({r.generation})"),
        *((("hosts", r.hosts), ("chips", r.chips)) if r.slices == 1 else (
            ("slices", f"{r.slices} over DCN" if r.min_slices == r.slices
             else f"{r.min_slices} to {r.slices} over DCN (elastic)"),
            ("hosts", f"{r.hosts} per slice, {r.hosts * r.slices} in all"),
            ("chips", f"{r.chips} per slice, {r.chips * r.slices} in all"))),
        ("zone", r.zone), ("project", r.project),
        *((("runtime", r.runtime_version),) if r.compute is None else (
            ("image", f"{r.compute.image_family} ({r.compute.image_project}), boot disk {r.compute.boot_disk_type}"),
            ("compute engine", _compute_line(r)))),
        ("provisioning", f"{r.spec.tpu.provisioning}{', queued' if r.spec.tpu.queued else ''}"),
        ("cost", cost), ("network", _network_line(r.spec.tpu.network)),
    ]
    for name, kind in r.disk_types.items():
        lines.append(("disk", f"{name} ({kind})"))
    for b in r.spec.buckets:
        lines.append(("bucket", f"{b.bucket} at {b.mount}"))
    for channel in r.public_dict()["spec"]["notify"]:
        target = channel["email"] or f"webhook {channel['webhook']}"
        lines.append(("notify", f"{target} on {', '.join(channel['on'])}"))
    typer.echo("\n".join(f"{k + ':':<13} {v}" for k, v in lines))
    typer.echo("spec is valid")
