"""A program's death says why, and dirty hosts, end to end on the emulator: the last log lines of
the host that died first and the exit code's meaning reach the event, `show` and `show --json`;
a host whose TPU is held by a stale process is cleaned before the next launch on a reused slice;
a host that stays bad (`dirty-host --sticky`), or a program that says a known bad-host line, ends
the attempt `bad_host` and the slice is replaced in the same sweep."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from reconcile_helpers import DEMO_OPTIMIZER, ZONE, host_root, node_ref, reconciler, record, resources, sweep_until

pytestmark = pytest.mark.slow

RUNTIME = f"""\
name: {{name}}
tpu: {{{{accelerator: v4-8, zone: {ZONE}, queued: false}}}}
requeue: {{{{backoff_seconds: 0, max_preemptions: 2, max_failures: 1, max_bad_hosts: 2}}}}
run:
  runtime: {{{{model: tiny, steps: {{steps}}, batch_size: 8, seq_len: 64, checkpoint_every: 1000,
            log_every: 5, heartbeat_every_s: 1, optimizer: {{optimizer}}}}}}
"""

BUSY = ("RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid "
        "4242. Not attempting to load libtpu.so in this process.")


def _record_runtime(ctx, tmp_path, name: str, steps: int):
    from tpujob.service import jobs

    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(RUNTIME.format(name=name, steps=steps, optimizer=DEMO_OPTIMIZER))
    return jobs.record(ctx, str(path))[0]


def _show(cli, job_id: int) -> dict:
    result = cli("show", "--json", str(job_id))
    assert result.code == 0, result.err
    return json.loads(result.out)


def _program_dir(local_cloud, project, attempt, job_id: int, user: str = "tpujob", host: int = 0):
    home = host_root(local_cloud, project, ZONE, attempt.slice_name, host) / "home" / user
    return home / ".tpujob" / "jobs" / f"{job_id:06d}" / f"attempt-{attempt.number}"


def _kill_the_program(local_cloud, project, attempt, job_id: int, host: int = 0, sig=signal.SIGKILL) -> None:
    """SIGKILL what runs under the program's wrapper (the wrapper itself records the 137), as
    the kernel's OOM killer would."""
    wrapper = int((_program_dir(local_cloud, project, attempt, job_id, host=host) / "program.pid").read_text())
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == wrapper]
    assert children
    for pid in children:
        os.kill(pid, sig)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _training(ctx, job_id: int) -> bool:
    attempt = ctx.store.current_attempt(job_id)
    return ctx.store.get(job_id).state == "RUNNING" and (attempt.last_step or 0) >= 1


def test_a_program_that_dies_says_why_in_the_event_and_show(cli, ctx, tmp_path, monkeypatch):
    from tpujob.service import jobs

    monkeypatch.setenv("API_TOKEN", "hunter2-deaths")
    command = ('echo "step 1"; echo "using $API_TOKEN, DB_PASSWORD=pa55word"; '
               'echo "Fatal Python error: Aborted" >&2; kill -ABRT $$')
    path = tmp_path / "dies.yaml"
    path.write_text(f"name: dies\ntpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}\n"
                    f"secrets: [API_TOKEN]\nrequeue: {{max_failures: 0}}\nrun: {{command: {json.dumps(command)}}}\n")
    job = jobs.record(ctx, str(path))[0]
    job = sweep_until(ctx, job.id, lambda j: j.state == "FAILED", timeout=90)
    data = _show(cli, job.id)
    expected = "program exited 134 (SIGABRT: Aborted) on host 0: "
    moved = [e["message"] for e in data["events"] if e["to_state"] == "FAILED"]
    assert moved and moved[0].startswith(expected), data["events"]
    assert "Fatal Python error: Aborted" in moved[0] and "step 1" in moved[0]
    assert data["attempts"][0]["cause"].startswith(expected)
    assert "Fatal Python error: Aborted" in data["attempts"][0]["cause"]
    text = cli("show", str(job.id)).out
    assert "#1 failed: program exited 134 (SIGABRT: Aborted) on host 0:" in text
    for seen in (json.dumps(data), text):
        assert "using ***, DB_PASSWORD=***" in seen
        assert "hunter2-deaths" not in seen and "pa55word" not in seen


def test_a_dirty_host_is_cleaned_before_the_next_attempt_on_the_same_slice(cli, ctx, local_cloud, project,
                                                                              tmp_path):
    job = _record_runtime(ctx, tmp_path, "dirty", steps=400)  # still training when killed
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, lambda j: _training(ctx, j.id), timeout=180, rec=rec, pause=0.5)
    first = ctx.store.current_attempt(job.id)
    said = cli("emulator", "dirty-host", node_ref(project, ZONE, first.slice_name), "--host", "0")
    assert said.code == 0, said.err
    stale = int(said.out.split(" pid ")[1].split()[0])
    _kill_the_program(local_cloud, project, first, job.id)
    job = sweep_until(ctx, job.id, lambda j: j.attempt == 2 and _training(ctx, j.id), timeout=180, rec=rec,
                      pause=0.5)
    attempts = ctx.store.attempts(job.id)
    assert attempts[0].end_reason == "failed" and "137 (SIGKILL: Killed)" in attempts[0].cause
    assert attempts[1].slice_name == first.slice_name   # the same slice, reused
    cleaned = [e.message for e in ctx.store.events(job.id) if e.message.startswith("cleaned host 0:")]
    assert any(f"pid {stale}" in m or f", {stale}" in m for m in cleaned), cleaned
    job = sweep_until(ctx, job.id, lambda j: j.state == "SUCCEEDED", timeout=240, rec=rec, pause=1.0)
    assert job.bad_hosts == 0


def test_a_host_that_stays_dirty_is_replaced_after_one_failed_attempt(cli, ctx, local_cloud, project, tmp_path):
    job = _record_runtime(ctx, tmp_path, "sticky", steps=1000)
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, lambda j: _training(ctx, j.id), timeout=180, rec=rec, pause=0.5)
    first = ctx.store.current_attempt(job.id)
    said = cli("emulator", "dirty-host", node_ref(project, ZONE, first.slice_name), "--host", "0", "--sticky")
    assert said.code == 0 and "sticky" in said.out, said.err
    _kill_the_program(local_cloud, project, first, job.id)   # the attempt before the host went bad
    job = sweep_until(ctx, job.id, lambda j: j.attempt >= 3, timeout=240, rec=rec, pause=0.5)
    attempts = ctx.store.attempts(job.id)
    # Attempt 2 on the same slice: cleaned, but the holder came back at once; the runtime found the TPU
    # busy (libtpu's words), and the slice went at once: attempt 3 is on a new one.
    assert [a.end_reason for a in attempts[:2]] == ["failed", "bad_host"]
    assert attempts[1].slice_name == first.slice_name != attempts[2].slice_name
    assert "Couldn't open iommu group /dev/vfio/0" in attempts[1].cause
    assert (job.bad_hosts, job.failures) == (1, 1)
    gone = [r for r in resources(local_cloud, project) if r[2] == first.slice_name]
    assert gone == [] or all(r[0] == "nodes" for r in gone)   # deleted (or still deleting)
    data = _show(cli, job.id)
    assert data["attempts"][1]["end_reason"] == "bad_host"
    assert data["accounting"]["bad_hosts"] == 1


def test_a_program_that_prints_a_bad_host_line_gets_a_new_slice_in_the_same_sweep(cli, ctx, local_cloud, project,
                                                                                  tmp_path):
    command = (f'if [ "$TPUJOB_ATTEMPT" = 1 ]; then echo {json.dumps(BUSY)} >&2; exit 1; fi; sleep 600')
    job = record(ctx, tmp_path, "badline", command=command, max_failures=0, max_bad_hosts=2)
    rec = reconciler(ctx)
    job = sweep_until(ctx, job.id, lambda j: j.state == "RUNNING", timeout=60, rec=rec)
    first = ctx.store.current_attempt(job.id)
    ended = _program_dir(local_cloud, project, first, job.id) / "exit_code"
    deadline = time.monotonic() + 30
    while not ended.exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    rec.sweep([job.id])   # one sweep: sees the line, deletes the slice, creates and sets up the next
    job = ctx.store.get(job.id)
    attempts = ctx.store.attempts(job.id)
    assert (job.state, job.attempt, job.bad_hosts, job.failures) == ("RUNNING", 2, 1, 0)
    assert attempts[0].end_reason == "bad_host" and BUSY in attempts[0].cause
    assert attempts[1].slice_name != first.slice_name
    assert first.slice_name not in {r[2] for r in resources(local_cloud, project) if r[0] == "queuedResources"}
    moved = [e.message for e in ctx.store.events(job.id) if e.to_state == "RECOVERING"]
    assert moved == [f"bad host 0: {BUSY}; bad host 1 of 2 allowed, replacing the slice"]


def test_a_peer_that_aborts_after_a_host_dies_is_a_lost_slice_not_a_failure(ctx, local_cloud, project, tmp_path):
    """Soak seed 4711: host 0 killed, host 1's JAX aborted once its peer was gone (134). That is
    the dead host's doing: a lost slice, counted as a preemption, never the failure budget."""
    job = record(ctx, tmp_path, "peer", accelerator="v4-16", max_failures=0, unhealthy_grace_seconds=1)
    rec = reconciler(ctx)
    sweep_until(ctx, job.id, lambda j: j.state == "RUNNING", rec=rec)
    first = ctx.store.current_attempt(job.id)
    local_cloud.kill_host(node_ref(project, ZONE, first.slice_name), 0)
    _kill_the_program(local_cloud, project, first, job.id, host=1, sig=signal.SIGABRT)
    exit_code = _program_dir(local_cloud, project, first, job.id, host=1) / "exit_code"
    deadline = time.monotonic() + 30
    while not exit_code.exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    rec.sweep([job.id])
    marked = ctx.store.get(job.id)
    assert (marked.state, marked.attempt, marked.failures) == ("RUNNING", 1, 0)
    assert marked.unhealthy_since is not None
    time.sleep(1.2)
    job = sweep_until(ctx, job.id, lambda j: j.attempt == 2 and j.state == "RUNNING", rec=rec)
    ended = ctx.store.attempts(job.id)[0]
    assert ended.end_reason == "preempted", ended.cause
    assert "134 (SIGABRT: Aborted) (taken down by the lost host)" in ended.cause
    assert (job.failures, job.preemptions) == (0, 1)
