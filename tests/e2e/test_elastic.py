"""An elastic multislice job on the emulator (tpu.slices {min: 1, max: 2}, two v4-8 slices of
one host each, the bundled runtime): slice 1 is preempted while v4-8 is stocked out. The job
goes on at once on slice 0 from the notice's checkpoint (twice the microbatches: the same global
batch), its steps keep rising while growing back fails, and once capacity returns it checkpoints
and goes on with both slices. One preemption counted; deleted, it leaves nothing behind. (A
two-slice job trained to SUCCEEDED is test_multislice's: here the last attempt would train its
remaining ~900 steps at two processes' collective pace, a minute of the suite's two cores.)"""

from __future__ import annotations

import json
import time

import pytest
from reconcile_helpers import ZONE, bucket_heartbeat, local_bucket, node_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS = 1000  # attempt 2 (one slice) must not reach it before growing back: then attempt 3 trains no step
SPEC = f"""\
name: elastic
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false, slices: {{min: 1, max: 2}}}}
run_dir: gs://BUCKET/runs
requeue: {{backoff_seconds: 2, max_preemptions: 2, max_failures: 0, min_run_seconds: 0}}
run:
  runtime:
    model: tiny
    steps: {STEPS}
    batch_size: 8
    seq_len: 32
    checkpoint_every: 1000   # the notice's save, the growth's and the final one
    log_every: 1
    heartbeat_every_s: 1
    sigterm_grace_s: 50   # the runtime's share of the 60 s notice below (its default, 25 s, is Spot's)
"""


def _show(cli, name: str) -> dict:
    result = cli("show", "--json", name)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_an_elastic_job_trains_on_the_slice_left_and_grows_back_when_capacity_returns(
        cli, local_cloud, shared_emulator, project, tmp_path):
    from tpujob.cloud.tpu_api import GcpCloud

    bucket = local_bucket(shared_emulator, project, "el")
    bucket_name = bucket.name
    spec = tmp_path / "elastic.yaml"
    spec.write_text(SPEC.replace("BUCKET", bucket_name))
    validated = cli("validate", spec)
    assert validated.code == 0 and "1 to 2 over DCN (elastic)" in validated.out, validated.out + validated.err
    assert cli("create", spec).code == 0

    def until(done, what: str, timeout: float = 240) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            assert cli("requeue").code == 0
            job = _show(cli, "elastic")
            if done(job):
                return job
            assert job["state"] not in ("FAILED", "SUCCEEDED"), [e["message"] for e in job["events"]][-10:]
            assert time.monotonic() < deadline, (what, [e["message"] for e in job["events"]][-10:])
            time.sleep(0.5)

    job = until(lambda j: j["state"] == "RUNNING" and (j["attempts"][0]["last_step"] or 0) >= 3, "training on 2")
    first = job["attempts"][0]
    assert first["nodes"] == [f"{first['slice_name']}-0", f"{first['slice_name']}-1"]

    # Slice 1 goes, and no v4-8 is to be had: the job goes on with slice 0 alone.
    local_cloud.stockout(ZONE, "v4-8")
    local_cloud.preempt(node_ref(project, ZONE, f"{first['slice_name']}-1"), grace_seconds=60)
    job = until(lambda j: j["attempt"] == 2 and j["state"] == "RUNNING", "on the slice left")
    second = job["attempts"][1]
    assert (second["slices"], second["nodes"]) == (1, [f"{first['slice_name']}-0"])
    assert job["attempts"][0]["end_reason"] == "preempted" and job["attempts"][0]["lost_slices"] == [1]

    # Steps keep rising on one slice while growing back fails for want of capacity.
    resumed = None

    def trained_on_one(j) -> bool:
        nonlocal resumed
        beat = bucket_heartbeat(bucket, j["id"])
        if beat.get("attempt") != 2 or not beat.get("startup"):
            return False
        resumed = beat.get("resumed_from")
        failed = any("could not grow back" in e["message"] for e in j["events"])
        return failed and beat["step"] >= (resumed or 0) + 20
    job = until(trained_on_one, "steps on one slice, growth refused")
    beat = bucket_heartbeat(bucket, job["id"])
    assert beat["startup"]["mesh"] == {"fsdp": 1} and beat["startup"]["microbatches"] == 2, beat
    assert resumed is not None and resumed >= 3

    # Capacity returns: the missing slice is made, the program checkpoints, both slices go on.
    local_cloud.stockout(ZONE, "v4-8", clear=True)

    def trained_on_two(j) -> bool:
        beat = bucket_heartbeat(bucket, j["id"])
        return (beat.get("attempt") == 3 and bool(beat.get("startup")) and j["state"] == "RUNNING"
                and beat["step"] >= (beat.get("resumed_from") or 0) + 3)
    job = until(trained_on_two, "back on 2 and training")
    third = job["attempts"][2]
    assert [(a["number"], a["end_reason"], a["slices"]) for a in job["attempts"]] == [
        (1, "preempted", 2), (2, "resized", 1), (3, None, 2)]
    assert third["nodes"][0] == f"{first['slice_name']}-0" and third["nodes"][1].endswith("-1")
    beat = bucket_heartbeat(bucket, job["id"])
    assert beat["resumed_from"] > resumed  # training went on between the two
    assert beat["startup"]["mesh"] == {"slices": 2, "fsdp": 1} and beat["startup"]["microbatches"] == 1
    assert job["preemptions"] == 1
    assert cli("delete", "elastic").code == 0
    listed = GcpCloud.for_emulator(shared_emulator["tpu_endpoint"]).list_slices(project, ZONE)
    assert not listed, sorted(listed)  # every slice of every attempt deleted
