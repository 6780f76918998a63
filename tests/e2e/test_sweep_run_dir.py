"""The sweep reads each running job's run dir on GCS (status.json, heartbeat) without SSH, and
decides with it: a succeeded run with a dead host is not re-run; a hung program gets a new slice."""

from __future__ import annotations

import time
import uuid

import pytest
from reconcile_helpers import ZONE, host_root, node_ref, reconciler, running, sweep_until

pytestmark = pytest.mark.slow

SPEC = """\
name: {name}
tpu: {{accelerator: v4-32, zone: {zone}, queued: false}}
run_dir: gs://rundir-tests/{prefix}
requeue: {{backoff_seconds: 0, unhealthy_grace_seconds: 0.5, heartbeat_timeout_seconds: {heartbeat_timeout}}}
run:
  command: |
{command}
"""


def record(ctx, tmp_path, name, command, heartbeat_timeout=300):
    from tpujob.service import jobs

    prefix = uuid.uuid4().hex[:8]  # the emulator's bucket outlives each test's store
    body = "\n".join("    " + line for line in command.strip().splitlines())
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, zone=ZONE, prefix=prefix, command=body, heartbeat_timeout=heartbeat_timeout))
    return jobs.record(ctx, str(path))[0], prefix


def what_host_0_holds(local_cloud, project: str, node: str) -> str:
    """For a failure's message: what host 0 has under the run dir's mount point, seen from
    outside its namespace (where the bucket's mount is not: a file here was written beside the
    mount, not through it), and its logs of this job. A run dir write that never reached the
    bucket was seen twice under load, its cause not yet known."""
    root = host_root(local_cloud, project, ZONE, node, 0)
    under = sorted(str(f.relative_to(root)) for f in (root / "mnt").rglob("*"))
    logs = {str(f.relative_to(root)): f.read_text(errors="replace")[-1500:]
            for f in root.glob("home/*/.tpujob/jobs/*/attempt-*/*.log")}
    return f"host 0 /mnt (outside the mount): {under}; logs: {logs}"


def test_a_run_that_said_succeeded_is_not_re_run_when_a_host_dies(ctx, project, local_cloud, bucket, tmp_path):
    job, prefix = record(ctx, tmp_path, "done", """
if [ "$TPUJOB_HOST_INDEX" = 3 ]; then sleep 600; fi
if [ "$TPUJOB_HOST_INDEX" = 0 ]; then
  printf '{"state": "succeeded", "step": 9, "message": "ok"}' > "$TPUJOB_RUN_DIR/status.json"
fi
""")
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, running, rec=rec)
    node = ctx.store.current_attempt(job.id).slice_name
    blob = bucket.blob(f"{prefix}/{job.id:06d}/status.json")
    deadline = time.monotonic() + 30
    while not blob.exists():
        assert time.monotonic() < deadline, "status.json never reached the bucket; " + \
            what_host_0_holds(local_cloud, project, node)
        time.sleep(0.2)
    # Hosts 0-2 exited 0 (their exit codes written: waited for, not slept on), host 3 is gone.
    for index in range(3):
        exit_codes = list(host_root(local_cloud, project, ZONE, node, index).glob(
            f"home/*/.tpujob/jobs/{job.id:06d}/attempt-1/exit_code"))
        deadline = time.monotonic() + 120  # bounds a hang only
        while not exit_codes:
            assert time.monotonic() < deadline, f"host {index}'s program never exited"
            time.sleep(0.1)
            exit_codes = list(host_root(local_cloud, project, ZONE, node, index).glob(
                f"home/*/.tpujob/jobs/{job.id:06d}/attempt-1/exit_code"))
    local_cloud.kill_host(node_ref(project, ZONE, node), 3)
    job = sweep_until(ctx, job.id, lambda j: j.state != "RUNNING", rec=rec)
    assert (job.state, job.attempt, job.preemptions) == ("SUCCEEDED", 1, 0)
    assert any("status.json: succeeded at step 9" in e.message for e in ctx.store.events(job.id))
    assert ctx.store.attempts(job.id)[0].last_step == 9  # what `show` prints as the attempt's STEP


def test_a_stale_heartbeat_is_a_hung_program(ctx, project, local_cloud, bucket, tmp_path):
    job, _ = record(ctx, tmp_path, "hung", """
if [ "$TPUJOB_HOST_INDEX" = 0 ]; then
  echo '{"time": 0, "step": 3, "phase": "training"}' > "$TPUJOB_RUN_DIR/heartbeat"
fi
sleep 600
""", heartbeat_timeout=1)
    rec = reconciler(ctx)
    try:
        job = sweep_until(ctx, job.id, lambda j: j.attempt == 2, rec=rec, timeout=90, pause=0.3)
    except AssertionError as failed:
        node = ctx.store.current_attempt(job.id).slice_name
        raise AssertionError(f"{failed}; {what_host_0_holds(local_cloud, project, node)}") from failed
    attempts = ctx.store.attempts(job.id)
    assert attempts[0].end_reason == "hung"  # its own budget (requeue.max_hangs), not a preemption
    assert any("program hung: heartbeat" in e.message for e in ctx.store.events(job.id))
