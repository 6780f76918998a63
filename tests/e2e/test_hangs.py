"""Hangs on emulated slices: a program alive on every host that makes no progress is ended as
`hung` (its own budget), after every host's Python stacks were kept in the attempt's local dir.

- the bundled runtime on 2 hosts, host 1 frozen (`tpujob emulator freeze`): host 0 blocks in its
  next collective while its heartbeat thread beats on; restarted on a new slice within
  heartbeat_timeout_seconds + one sweep;
- a user's program that stops printing: hung after run.hang_seconds.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
from reconcile_helpers import DEMO_OPTIMIZER, ZONE, node_ref

pytestmark = pytest.mark.slow

TIMEOUT = 20  # requeue.heartbeat_timeout_seconds

RUNTIME_SPEC = f"""\
name: frozen
tpu: {{accelerator: v4-16, zone: {ZONE}, queued: false}}
run_dir: gs://BUCKET/runs
requeue: {{backoff_seconds: 0, max_preemptions: 2, max_failures: 0, max_hangs: 1,
          heartbeat_timeout_seconds: {TIMEOUT}}}
run:
  runtime: {{model: tiny, steps: 100000, batch_size: 8, seq_len: 64, checkpoint_every: 100000,
            log_every: 5, heartbeat_every_s: 1, optimizer: {DEMO_OPTIMIZER}}}
"""

SILENT_PROGRAM = ("python3 -c 'import faulthandler, signal, time; "
                  "faulthandler.register(signal.SIGUSR1, all_threads=True); "
                  "print(\"working\", flush=True); time.sleep(3600)'")

SILENT_SPEC = f"""\
name: silent
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
requeue: {{backoff_seconds: 0, max_hangs: 0}}
run: {{command: {json.dumps(SILENT_PROGRAM)}, hang_seconds: 5}}
"""


def _show(cli, name: str) -> dict:
    result = cli("show", "--json", name)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _requeue_until(cli, name: str, done, timeout: float) -> tuple[dict, float]:
    """Sweeps until `done`; the data and the longest sweep seen (s)."""
    deadline, longest = time.monotonic() + timeout, 0.0
    while True:
        started = time.monotonic()
        result = cli("--debug", "requeue")
        longest = max(longest, time.monotonic() - started)
        assert result.code == 0, result.err
        data = _show(cli, name)
        if done(data):
            return data, longest
        assert time.monotonic() < deadline, json.dumps(data, indent=1)[-3000:]
        time.sleep(0.5)


def _stacks_file(data: dict) -> Path:
    (said,) = [e["message"] for e in data["events"] if e["kind"] == "stacks"]
    found = re.search(r"kept in (\S+)$", said)
    assert found, said
    return Path(found.group(1))


@pytest.mark.timeout(600)  # about 2 min here
def test_a_frozen_host_is_hung_its_stacks_kept_and_the_job_restarted_on_a_new_slice(
        cli, local_cloud, shared_emulator, project, tmp_path):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tpujob.attempt.buckets import create_local_bucket

    bucket = f"hang-{uuid.uuid4().hex[:8]}"
    create_local_bucket(storage.Client(project=project, credentials=AnonymousCredentials(),
                                 client_options={"api_endpoint": shared_emulator["storage_endpoint"]}), bucket)
    spec = tmp_path / "frozen.yaml"
    spec.write_text(RUNTIME_SPEC.replace("BUCKET", bucket))
    assert cli("create", spec).code == 0

    data, _ = _requeue_until(cli, "frozen", lambda d: (d["attempts"][0]["last_step"] or 0) >= 3, timeout=240)
    first = data["attempts"][0]["slice_name"]
    assert local_cloud.freeze(node_ref(project, ZONE, first), 1) >= 1
    frozen_at = time.time()

    data, longest = _requeue_until(cli, "frozen", lambda d: d["attempts"][0]["end_reason"] is not None,
                                   timeout=TIMEOUT + 180)
    assert data["attempts"][0]["end_reason"] == "hung", [e["message"] for e in data["events"]]
    (move,) = [e for e in data["events"] if e["message"].startswith("program hung: ")]
    assert move["to_state"] == "RECOVERING"
    assert "no progress at step" in move["message"] and "hang 1 of 1 allowed" in move["message"]
    from datetime import datetime

    ended = datetime.fromisoformat(move["at"]).timestamp()
    # Within heartbeat_timeout_seconds + one sweep (+ a step to block in, and the heartbeat's
    # one-second resolution).
    assert ended - frozen_at <= TIMEOUT + longest + 5, (ended - frozen_at, longest)

    stacks = _stacks_file(data).read_text()
    host0, host1 = stacks.split("== host 1 ==")
    assert "== host 0 ==" in host0 and "(most recent call first)" in host0 and "loop.py" in host0, stacks
    assert "1 of them stopped and continued" in host1 and "(most recent call first)" in host1, stacks

    data, _ = _requeue_until(cli, "frozen", lambda d: len(d["attempts"]) >= 2, timeout=120)
    assert data["attempts"][1]["slice_name"] != first  # a new slice
    assert "1 hangs" in cli("show", "frozen").out and data["accounting"]["hangs"] == 1
    assert cli("delete", "frozen").code == 0


def test_a_program_that_stops_printing_is_hung_after_run_hang_seconds(cli, local_cloud, project, tmp_path):
    spec = tmp_path / "silent.yaml"
    spec.write_text(SILENT_SPEC)
    assert cli("create", spec).code == 0
    data, _ = _requeue_until(cli, "silent", lambda d: d["state"] in ("FAILED", "SUCCEEDED"), timeout=240)
    assert (data["state"], data["end_reason"]) == ("FAILED", "hang_budget"), [e["message"] for e in data["events"]]
    assert [a["end_reason"] for a in data["attempts"]] == ["hung"]
    (move,) = [e for e in data["events"] if e["message"].startswith("program hung: ")]
    assert re.fullmatch(r"program hung: no log output on any host for \d+ s \(run\.hang_seconds 5\); "
                        r"hang budget of 0 spent \(hang_budget\)", move["message"]), move["message"]
    stacks = _stacks_file(data).read_text()
    assert "1 processes asked for their stacks" in stacks and 'File "<string>"' in stacks, stacks
    assert cli("delete", "silent").code == 0
