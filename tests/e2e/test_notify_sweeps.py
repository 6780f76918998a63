"""Real jobs on the emulator, preempted once, then driven to their end by rounds of four
`tpujob requeue` processes at once: the local webhook receiver and SMTP server get exactly one
message per preemption and per success, for each channel."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from notify_servers import Mailbox, Webhook
from reconcile_helpers import ZONE, finish, node_ref, reconciler, requeue_processes, running, spec_text, sweep_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

JOBS, SWEEPS = 3, 4


def test_four_requeue_processes_notify_each_move_once(ctx, local_cloud, project, tmp_path, monkeypatch):
    from tpujob.service import jobs

    hook, box = Webhook(), Mailbox()
    try:
        for key, value in box.settings().items():
            monkeypatch.setenv(key, value)
        channels = [{"webhook": hook.url(), "on": ["preempted", "succeeded", "failed"]},
                    {"email": "me@example.org", "on": ["preempted", "succeeded", "failed"]}]
        path = tmp_path / f"notify-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(spec_text("notified", command="sleep 4", min_run_seconds=0)
                        + f"notify: {json.dumps(channels)}\n")
        ids = [jobs.record(ctx, str(path))[0].id for _ in range(JOBS)]
        rec = reconciler(ctx)
        for job_id in ids:
            sweep_until(ctx, job_id, running, rec=rec)
        for job_id in ids:
            local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job_id).slice_name))

        deadline = time.monotonic() + 240
        while True:
            for code, _, err in finish(requeue_processes(SWEEPS), timeout=200):
                assert code == 0, err
            if all(ctx.store.get(i).state == "SUCCEEDED" for i in ids) or time.monotonic() > deadline:
                break
            time.sleep(1)
        for code, _, err in finish(requeue_processes(SWEEPS), timeout=200):  # the last moves' rows
            assert code == 0, err

        assert [(ctx.store.get(i).state, ctx.store.get(i).preemptions) for i in ids] == [("SUCCEEDED", 1)] * JOBS
        told = [(i, e.to_state) for i in ids for e in ctx.store.events(i)
                if e.kind == "state" and (e.to_state == "SUCCEEDED" or e.to_state == "RECOVERING")]
        assert sorted(told) == sorted((i, s) for i in ids for s in ("RECOVERING", "SUCCEEDED"))
        expected = sorted(f"tpujob: job {e_job:06d} 'notified' {e.to_state}: {e.message}"
                          for e_job in ids for e in ctx.store.events(e_job)
                          if e.kind == "state" and e.to_state in ("RECOVERING", "SUCCEEDED"))
        assert sorted(hook.texts) == expected
        assert sorted(box.bodies()) == expected
    finally:
        hook.close()
        box.close()
