"""The bundled runtime on a 2-host emulated slice, preempted mid-run: `requeue` re-creates the
slice, training resumes from the SIGTERM checkpoint in the shared gs:// run dir and succeeds,
and `show` counts 0 steps lost to the preemption."""

from __future__ import annotations

import json
import time

import pytest
from reconcile_helpers import DEMO_OPTIMIZER, ZONE, local_bucket, node_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # about 1.5 min here

STEPS = 100  # room for a loaded machine's slow sweeps between the first steps and the notice
SPEC = f"""\
name: rtp
tpu: {{accelerator: v4-16, zone: {ZONE}, queued: false}}
run_dir: gs://BUCKET/runs
requeue: {{backoff_seconds: 0, max_preemptions: 2, max_failures: 0}}
run:
  runtime:
    model: tiny
    steps: {STEPS}
    batch_size: 8
    seq_len: 64
    checkpoint_every: 1000   # only the SIGTERM save and the final one: saves on gcsfuse are slow
    log_every: 5
    heartbeat_every_s: 1
    sigterm_grace_s: 110   # the runtime's share of the 120 s notice below (its default, 25 s, is Spot's)
    optimizer: {DEMO_OPTIMIZER}
"""


def _show(cli) -> dict:
    result = cli("show", "--json", "rtp")
    assert result.code == 0, result.err
    return json.loads(result.out)


def _requeue_until(cli, done, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        result = cli("--debug", "requeue")
        assert result.code == 0, result.err
        data = _show(cli)
        if done(data):
            return data
        assert time.monotonic() < deadline, json.dumps(data, indent=1)[-3000:]
        time.sleep(0.5)


def test_a_preempted_runtime_resumes_from_its_sigterm_checkpoint_and_loses_no_step(
        cli, local_cloud, shared_emulator, project, tmp_path):
    bucket = local_bucket(shared_emulator, project, "rtp")
    bucket_name = bucket.name
    spec = tmp_path / "rtp.yaml"
    spec.write_text(SPEC.replace("BUCKET", bucket_name))
    assert cli("create", spec).code == 0

    def run_file(name: str):
        blob = bucket.get_blob(f"runs/{_show(cli)['id']}/{name}")
        return json.loads(blob.download_as_bytes()) if blob is not None else None

    # Training on both hosts, as its heartbeat says, read from the bucket every 0.2 s and
    # preempted at once: not after a sweep, which on a loaded machine takes seconds while the
    # hosts train (with the suite's load lighter, a sweep recording step 3 first once let the
    # program finish its 100 steps before the notice).
    data = _requeue_until(cli, lambda d: d["state"] == "RUNNING", timeout=90)
    first = data["attempts"][0]["slice_name"]
    deadline = time.monotonic() + 90
    while (seen := (run_file("heartbeat") or {}).get("step") or 0) < 3:
        assert time.monotonic() < deadline, run_file("heartbeat")
        time.sleep(0.2)
    # Standard's 120 s notice, not Spot's 30 s: the hosts are off once the save is done, so it
    # costs nothing, and beside the heaviest tests a two-host SIGTERM save takes 25-30 s here.
    local_cloud.preempt(node_ref(project, ZONE, first), grace_seconds=120)

    # The node reads PREEMPTED only once its hosts are down (as on Google): by then the program
    # has written its SIGTERM checkpoint and said so.
    status = run_file("status.json")
    assert status is not None and status["state"] == "preempted", status
    saved = status["step"]
    assert seen <= saved < STEPS

    data = _requeue_until(cli, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=120)
    assert data["state"] == "SUCCEEDED", [e["message"] for e in data["events"]]
    assert [(a["number"], a["end_reason"]) for a in data["attempts"]] == [(1, "preempted"), (2, "succeeded")]
    assert data["attempts"][1]["slice_name"] != first  # a new slice
    assert data["attempts"][1]["resumed_from_step"] == saved
    (lost,) = data["accounting"]["lost_steps"]
    assert (lost["attempt"], lost["resumed_from_step"], lost["lost_steps"]) == (1, saved, 0)

    final = run_file("status.json")
    assert (final["state"], final["step"], final["resumed_from"]) == ("succeeded", STEPS, saved)
    assert cli("delete", "rtp").code == 0
