"""Four sweeping processes at once, each moving jobs under their leases (as the Reconciler does)
and delivering the outbox after every move: the local webhook receiver and SMTP server get
exactly one message per notified move and channel."""

from __future__ import annotations

import json
import multiprocessing

from notify_servers import Mailbox, Webhook
from spec_texts import dedent_spec

JOBS = 6
PROCESSES = 4


def _next_move(job):
    """The next move of the scripted life: running, preempted once, running again, succeeded."""
    from tpujob.store.states import State

    state = State(job.state)
    if state == State.RUNNING:
        return (State.SUCCEEDED, {}) if job.preemptions else (State.RECOVERING, {"preemptions": 1})
    return {State.PENDING: (State.PROVISIONING, {}), State.PROVISIONING: (State.SETTING_UP, {}),
            State.SETTING_UP: (State.RUNNING, {}), State.RECOVERING: (State.PROVISIONING, {})}.get(state)


def _sweeper(job_ids, barrier, results) -> None:
    """One sweep process: moves what it can lease, delivers after each move, until all ended."""
    from tpujob.errors import ConflictError
    from tpujob.service.context import Context
    from tpujob.service.notify import deliver_due
    from tpujob.store.states import State

    try:
        ctx = Context.load()
        barrier.wait()
        sent = 0
        while True:
            ended = 0
            for job_id in job_ids:
                try:
                    ctx.store.acquire_lease(job_id, ctx.actor, 30)
                except ConflictError:
                    continue
                try:
                    job = ctx.store.get(job_id)
                    move = _next_move(job)
                    if move is None:
                        ended += 1
                        continue
                    ctx.store.transition(job_id, State(job.state), move[0], f"to {move[0].value}",
                                         owner=ctx.actor, **move[1])
                finally:
                    ctx.store.release_lease(job_id, ctx.actor)
                sent += sum(o.sent for o in deliver_due(ctx))
            if ended == len(job_ids):
                break
        sent += sum(o.sent for o in deliver_due(ctx))
        results.put(("ok", sent))
    except Exception as exc:  # reported to the test, not lost in a child's stderr
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_four_sweeps_send_each_notification_exactly_once(tpujob_home, monkeypatch, spec_file):
    from tpujob.service import jobs
    from tpujob.service.context import Context
    from tpujob.store.outbox import Outboxes

    hook = Webhook(delay=0.02)  # slow enough for sweeps to reach the same rows at once
    box = Mailbox()
    try:
        for key, value in box.settings().items():
            monkeypatch.setenv(key, value)
        ctx = Context.load()
        channels = [{"webhook": hook.url(), "on": ["preempted", "succeeded"]},
                    {"email": "me@example.org", "on": ["preempted", "succeeded"]}]
        ids = []
        for i in range(JOBS):
            path = spec_file(dedent_spec(f"""
                name: job-{i}
                tpu: {{accelerator: v4-8, zone: us-central2-b}}
                run: {{command: python train.py}}
                notify: {json.dumps(channels)}
                """))
            ids.append(jobs.record(ctx, str(path))[0].id)

        mp = multiprocessing.get_context("spawn")
        barrier = mp.Barrier(PROCESSES, timeout=120)
        results = mp.Queue()
        procs = [mp.Process(target=_sweeper, args=(ids, barrier, results)) for _ in range(PROCESSES)]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=240) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert [o[0] for o in outcomes] == ["ok"] * PROCESSES, outcomes
        print(f"sends per process: {[o[1] for o in outcomes]}")

        expected = sorted(f"tpujob: job {i:06d} 'job-{i - 1}' {state}: to {state}"
                          for i in ids for state in ("RECOVERING", "SUCCEEDED"))
        assert sorted(hook.texts) == expected
        assert sorted(box.bodies()) == expected
        assert sum(o[1] for o in outcomes) == 2 * len(expected)
        rows = [r for i in ids for r in Outboxes(ctx.store.engine).rows(i)]
        assert len(rows) == 2 * len(expected)
        assert {(r.status, r.attempts) for r in rows} == {("sent", 1)}
    finally:
        hook.close()
        box.close()
