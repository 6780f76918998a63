"""The soak's invariants (scripts/soak.py), checked once the night has settled: jobs in a legal
end state or RUNNING, one live slice per attempt and none without one, no orphan `tpujob gc`
would list, events in order and chained, runtime steps monotone within the lost-step bounds,
and no runtime failure the night did not cause; every failed attempt says why (its cause); every
job's ledger adds up to its wall time within 1 %."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Callable


def check(night, *, zone: str, compute_zone: str, checkpoint_every: int,
          gc: Callable[[], subprocess.CompletedProcess]) -> tuple[list[str], int]:
    """The invariants on what the night (`soak.Night`) left: (violations, checks made). `gc`
    runs `tpujob gc --json` on the night's store."""
    from tpujob.store.states import ENDED, TRANSITIONS, State

    ctx, violations, checks = night.ctx, [f"not settled after the faults stopped: {u}" for u in night.unsettled], 1
    jobs = ctx.store.list_jobs(include_ended=True)
    live: dict[tuple[str, str], int] = {}
    for job in jobs:
        checks += 1
        if not (State(job.state) in ENDED or job.state == "RUNNING"):
            violations.append(f"job {job.id} left {job.state}")
        attempt = ctx.store.current_attempt(job.id)
        if job.state not in {s.value for s in ENDED} and attempt is not None and attempt.ended_at is None:
            key = (attempt.zone, attempt.slice_name)
            if key in live:
                violations.append(f"slice {key} claimed by jobs {live[key]} and {job.id}")
            live[key] = job.id
        # Events: in order, each move legal and chained from the one before.
        checks += 1
        events = ctx.store.events(job.id)
        if [e.id for e in events] != sorted(e.id for e in events) or \
                any(b.at < a.at for a, b in zip(events, events[1:])):
            violations.append(f"job {job.id}: events out of order")
        state = None
        for event in (e for e in events if e.to_state):
            if state is not None and (event.from_state != state or
                                      State(event.to_state) not in TRANSITIONS[State(state)]):
                violations.append(f"job {job.id}: move {event.from_state} -> {event.to_state} after {state}")
            state = event.to_state
        if state != job.state:
            violations.append(f"job {job.id}: last move to {state}, job {job.state}")
        checks += 1
        violations += _unexplained(job.id, ctx.store.attempts(job.id))
        checks += 1
        gap, off = _ledger_off(job, ctx.store.attempts(job.id), events)
        night.ledger_gaps.append(gap)
        violations += off
        if job.id in night.runtime_jobs:
            checks += 2
            attempts = ctx.store.attempts(job.id)
            found, resumptions = _steps(job.id, attempts, night.preempted, night.killed,
                                        checkpoint_every * (2 if night.runtime_jobs[job.id] else 1))
            violations += found + _failures(job.id, attempts, events, night.killed)
            night.resumptions += resumptions
    # Cloud: every node and queued resource is a live attempt's, once; gc finds no orphan.
    checks += 1
    from tpujob.clients import make_cloud

    cloud, project = make_cloud(ctx.settings), ctx.default_project
    for where, listed in ((zone, cloud.list_tpu_resources(project, zone)),
                          (compute_zone, cloud.for_api("compute").list_tpu_resources(project, compute_zone))):
        for resource in listed:
            if (where, resource.name) not in live:
                violations.append(f"{resource.kind} {resource.name} in {where} belongs to no live attempt")
    checks += 1
    gc = gc()
    if gc.returncode != 0:
        violations.append(f"tpujob gc exited {gc.returncode}: {gc.stderr.strip()[-300:]}")
    elif json.loads(gc.stdout):
        violations.append(f"tpujob gc lists orphans: {[r.get('name') for r in json.loads(gc.stdout)]}")
    return violations, checks


def _ledger_off(job, attempts: list, events: list) -> tuple[float, list[str]]:
    """The job's ledger (service/ledger.py): how far its buckets are from its wall time (a share
    of it), and a violation where that is over 1 %."""
    import time

    from tpujob.service.ledger import job_ledger, price_of
    from tpujob.spec.stored import spec_of

    led = job_ledger(job, attempts, events, time.time(), price_of(spec_of(job).provisioning))
    total = sum(led.buckets.values())
    gap = abs(total - led.wall_seconds) / max(led.wall_seconds, 1e-9)
    if gap > 0.01:
        return gap, [f"job {job.id}: ledger buckets add up to {total:.1f} s of {led.wall_seconds:.1f} s wall"]
    return gap, []


# A failed attempt's cause that says no more than the exit code: no status.json message, no
# signal's meaning, no log line (tpujob/reconcile/decide.py builds the words, budgets.py the retry count).
_BARE = re.compile(r"program exited \d+(; retry \d+ of \d+)?")


def _unexplained(job_id: int, attempts: list) -> list[str]:
    """Every attempt that ended failed or bad_host says why, in more words than its exit code."""
    return [f"job {job_id}: attempt {a.number} {a.end_reason} without a cause: {a.cause!r}"
            for a in attempts if a.end_reason in ("failed", "bad_host")
            and (not a.cause or _BARE.fullmatch(a.cause))]


def _failures(job_id: int, attempts: list, events: list, killed: set) -> list[str]:
    """The runtime fails only where the night made it: no fault here is a program error, so an
    attempt that ended `failed` without a host of it killed (its peers may then abort) is a
    violation, told with the sweep's cause (a checkpoint that cannot be restored was one)."""
    found = []
    for attempt in attempts:
        if attempt.end_reason != "failed" or (job_id, attempt.number) in killed:
            continue
        # The move out of RUNNING that ended it: the first after its start.
        causes = [e.message for e in events if e.from_state == "RUNNING" and e.at >= attempt.started_at]
        found.append(f"job {job_id}: attempt {attempt.number} failed: {(causes or ['?'])[0][:300]}")
    return found


def _steps(job_id: int, attempts: list, preempted: dict, killed: set,
           without_notice: int) -> tuple[list[str], int]:
    """Violations of the step invariant, and how many resumptions were checked. An attempt
    preempted with SIGTERM grace loses no step, unless a host of it had been killed (then its
    program died without notice) or its checkpoint was not written within the grace (a save
    still in flight is waited for first; status.json then never said `preempted`). Without
    notice (SIGKILL, a dead host) an attempt loses at most one checkpoint interval with
    synchronous saves; with async ones the save of the step before may still be in flight when
    the host dies (the next save waits for it), so up to two (docs/runtime.md)."""
    found, checked = [], 0
    for before, after in zip(attempts, attempts[1:]):
        if after.resumed_from_step is None or before.last_step is None:
            continue
        checked += 1
        resumed_before = before.resumed_from_step or 0
        if after.resumed_from_step < resumed_before:
            found.append(f"job {job_id}: attempt {after.number} resumed at step {after.resumed_from_step}, "
                         f"behind attempt {before.number}'s start {resumed_before}")
        lost = max(0, before.last_step - after.resumed_from_step)
        noticed = preempted.get((job_id, before.number)) == "sigterm" and (job_id, before.number) not in killed
        allowed = 0 if noticed else without_notice
        if lost > allowed:
            kind = preempted.get((job_id, before.number), before.end_reason)
            kind += ", a host killed" if (job_id, before.number) in killed else ""
            found.append(f"job {job_id}: attempt {before.number} ({kind}) lost {lost} steps (allowed {allowed})")
    return found, checked
