"""Driving jobs forward: one sweep (`requeue`), a loop of sweeps (`watch`), following one job
(`create`, `resume`). All of them run the same Reconciler."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

from tpujob.clients import make_cloud
from tpujob.service.context import Context
from tpujob.settings import knob
from tpujob.store.states import ENDED, State

if TYPE_CHECKING:
    from tpujob.store.models import Event


def reconciler(ctx: Context, *, progress: Callable | None = None):
    """The Reconciler every sweep runs, with the knobs TPUJOB_LEASE_SECONDS (the crash tests
    shorten it) and TPUJOB_SWEEP_WORKERS (tpujob/settings.py KNOBS). `progress(step, Progress)`
    hears each host step as hosts finish it."""
    from tpujob.attempt.hosts import SshHostOps
    from tpujob.attempt.run_dirs import GcsRunDirs
    from tpujob.reconcile.reconciler import Reconciler

    workers = int(knob("SWEEP_WORKERS"))  # a bad value is refused before the cloud (or the emulator) starts
    lease = knob("LEASE_SECONDS")  # so is this one
    cloud = make_cloud(ctx.settings, on_first_use=True)  # no job to look at: no emulator started
    hosts = SshHostOps(ctx, cloud, progress=progress, actor=ctx.actor, lease_seconds=lease)
    return Reconciler(ctx.store, cloud, hosts, ctx.actor,
                      ssh_keys=lab_ssh_keys(ctx), node=node_name(ctx),
                      metadata=hosts.logins.node_metadata(), clock=ctx.store.clock,
                      lease_seconds=lease, run_dirs=GcsRunDirs(ctx.settings),
                      workers=workers)


def node_name(ctx: Context) -> str:
    """This node as the lab's table and reports name it: its host and $TPUJOB_HOME."""
    import socket

    return f"{socket.gethostname()}:{ctx.settings.home}"


def lab_ssh_keys(ctx: Context) -> tuple[str, ...]:
    """The `ssh-keys` lines a new slice gets: this node's key registered in the store first
    (Store.register_node, store/repository.py), then every key of the lab, each for this node's ssh_user (the user the
    attempt's program will run as: any node then logs in as it, attempt/hosts.py)."""
    from tpujob.hosts.keys import public_key_line

    own = public_key_line(ctx.settings.home)
    ctx.store.register_node(own, node_name(ctx))
    user = ctx.settings.ssh_user
    keys = [own] + [n.public_key for n in ctx.store.lab_nodes() if n.public_key != own]
    return tuple(f"{user}:{key}" for key in keys)


def requeue(ctx: Context, job_refs: list[str] | None = None, *, settle: float = 0.0):
    """One sweep over the given jobs (all active ones when none are given). With `settle`, the
    jobs it leaves setting up are swept again, those alone, until their setup has ended or
    `settle` seconds have passed: a setup runs detached on the hosts, and from cron the program
    would otherwise start only at the next run, minutes after its setup ended."""
    from tpujob.service.notify import courier

    ids = None if not job_refs else [ctx.store.find(ref).id for ref in job_refs]
    rec = reconciler(ctx)
    with courier(ctx) as notices:  # told beside the sweep: a slow endpoint never holds it up
        report = rec.sweep(ids)
        notices.wake()  # the moves this sweep (or another) committed
        if settle > 0:
            _settle_setups(ctx, rec, report, ids, time.monotonic() + settle, notices)
    return report


def _settle_setups(ctx: Context, rec, report, ids: list[int] | None, deadline: float, notices) -> None:
    def setting_up() -> list[int]:
        return [j.id for j in ctx.store.list_jobs(states=[State.SETTING_UP]) if ids is None or j.id in ids]

    poll = 0.5 if ctx.settings.cloud == "local" else 5.0
    followed = setting_up()
    report.setups_followed = len(followed)
    waiting = followed
    while waiting and time.monotonic() + poll < deadline:
        time.sleep(poll)
        rec.sweep(waiting)  # these jobs only: one listing of their zones, one SSH round each
        notices.wake()
        waiting = [i for i in setting_up() if i in followed]
    report.setups_ended = len(followed) - len(waiting)


def watch(ctx: Context, interval: float, on_report: Callable, max_sweeps: int | None = None,
          stop: threading.Event | None = None) -> None:
    """Sweep every `interval` s until `max_sweeps` or `stop` is set (checked between sweeps);
    registered as a watcher meanwhile (`create` and `doctor` look for one: see watchers)."""
    from tpujob.service import watchers
    from tpujob.service.notify import courier

    rec = reconciler(ctx)
    stop = stop or threading.Event()
    count = 0
    with watchers.watching(interval) as heartbeat, courier(ctx) as notices:
        while (max_sweeps is None or count < max_sweeps) and not stop.is_set():
            if count:  # seen again, and the keys of nodes that joined since go on new slices
                rec.use_ssh_keys(lab_ssh_keys(ctx))
            on_report(rec.sweep())
            notices.wake()
            heartbeat.touch()
            count += 1
            if max_sweeps is None or count < max_sweeps:
                stop.wait(interval)


def check_follow_settings() -> None:
    """Refuse a bad TPUJOB_* value that following a job reads, before a job is recorded (a
    `create` that refuses after recording would leave a job no command asked to follow)."""
    for name in ("SWEEP_WORKERS", "LEASE_SECONDS", "QUEUE_FOLLOW_SECONDS"):
        knob(name)


def follow(ctx: Context, job_id: int, *, until_ended: bool, timeout: float,
           on_event: Callable[[Event], None] = lambda e: None,
           on_progress: Callable | None = None, poll: float | None = None):
    """Sweep one job until it runs (or, with until_ended, until it ends); report new events,
    and, through `on_progress(step, Progress)`, each host step (sync, mount, setup, launch)."""
    from tpujob.service.notify import courier

    rec = reconciler(ctx, progress=on_progress)
    queue_follow = knob("QUEUE_FOLLOW_SECONDS")
    poll = poll if poll is not None else (0.2 if ctx.settings.cloud == "local" else 5.0)
    seen = 0
    deadline = time.monotonic() + timeout
    waiting_since: float | None = None
    refused = 0  # sweeps in a row whose login on the job's hosts was refused
    with courier(ctx) as notices:  # told beside the sweeps: a slow endpoint never holds them up
        while True:
            rec.sweep([job_id])
            notices.wake()
            events = ctx.store.events(job_id)
            for event in events[seen:]:
                on_event(event)
            seen = len(events)
            if job_id in rec.auth_errors:  # the fix is the user's (a role, an API, a login): say it
                raise rec.auth_errors[job_id]
            # This node cannot log in on the hosts (the job is left as it is): said once a second
            # sweep agrees, as a key this node just added to the slice lets it in on the next one.
            refused = refused + 1 if job_id in rec.node_problems else 0
            if refused >= 2:
                from tpujob.errors import SshAuthRefused

                raise SshAuthRefused(rec.node_problems[job_id])
            job = ctx.store.get(job_id)
            state = State(job.state)
            if state == State.FAILED and job_id in rec.config_errors:  # a zone the project may not use
                raise rec.config_errors[job_id]
            if state in ENDED or (not until_ended and state == State.RUNNING):
                return job
            if time.monotonic() > deadline:
                return job
            if not until_ended and state == State.QUEUED:
                # Waiting for the lab's quota (docs/scheduler.md): as for capacity, the sweeps
                # take it from here once a while has shown it is not admitted at once.
                waiting_since = waiting_since if waiting_since is not None else time.monotonic()
                if time.monotonic() - waiting_since > queue_follow:
                    return job
            elif not until_ended and state == State.PROVISIONING:
                waiting_since = _waiting_since(rec, job, waiting_since)
                if waiting_since is not None and time.monotonic() - waiting_since > queue_follow:
                    return job  # waiting for capacity (hours, maybe): the sweeps take it from here
            else:
                waiting_since = None
            time.sleep(poll)


def _waiting_since(rec, job, since: float | None) -> float | None:
    """When the job's slice was first seen waiting for capacity (QUEUED), or None if it is not."""
    from tpujob.cloud.base import SlicePhase
    from tpujob.reconcile.attempt_slices import attempt_slice

    attempt = rec.store.current_attempt(job.id)
    if attempt is None:
        return None
    seen = attempt_slice(rec.cloud, job, attempt)
    if seen.phase != SlicePhase.QUEUED:
        return None
    return since if since is not None else time.monotonic()
