"""Multislice on the emulator: one job on two v4-16 slices (2 hosts each, joined as one JAX
program over "DCN") through one queued resource (multisliceParams), one slice preempted mid-run.
The attempt ends whole, a new attempt makes both slices again, training resumes from the SIGTERM
checkpoint and succeeds; its losses equal, bit for bit, those of the same job run without a
preemption, and those of one slice with the same global batch to a stated tolerance."""

from __future__ import annotations

import json
import time

import pytest
from reconcile_helpers import ZONE, AtStep, bucket_heartbeat, local_bucket, node_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # three jobs side by side: ~3 min here

# Preempted once its heartbeat in the bucket says step 3 (within a second of it: heartbeat_every_s
# 1, read every 0.2 s), then resumed: 40 leaves 35 or more steps (0.1-0.3 s each here) for the
# notice to land in. Each step is about 0.1 CPU-second per process, and ten processes train.
STEPS = 40
SPEC = f"""\
name: NAME
tpu: {{accelerator: v4-16, zone: {ZONE}, queued: QUEUED, slices: SLICES}}
run_dir: gs://BUCKET/runs
requeue: {{backoff_seconds: 0, max_preemptions: 2, max_failures: 0, min_run_seconds: 0}}
run:
  runtime:
    model: tiny
    steps: {STEPS}
    batch_size: 8
    seq_len: 32
    checkpoint_every: 1000   # only the SIGTERM save and the final one: saves on gcsfuse are slow
    log_every: 1
    heartbeat_every_s: 1
    sigterm_grace_s: 110   # the runtime's share of the 120 s notice below (its default, 25 s, is Spot's)
"""
# One slice against two with the same global batch: the same data and the same arithmetic,
# summed in another order (each slice's partial gradient, then the all-reduce across slices,
# against one reduction), so float32 rounding differs from the first step on and Adam carries
# it forward. Measured here (2 processes, tiny, batch 8): at most 3.6e-5 relative by step 50,
# 1.5e-4 by 200, 2.8e-4 by 400. 1e-3 leaves that room while still failing on a real difference
# (another batch, a gradient shard missed: the loss moves by 1e-2 or more within a few steps).
ONE_SLICE_RTOL = 1e-3


def _show(cli, name: str) -> dict:
    result = cli("show", "--json", name)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _status_when(bucket, job_id, done, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        blob = bucket.get_blob(f"runs/{job_id}/status.json")
        status = json.loads(blob.download_as_bytes()) if blob is not None else {"state": "running"}
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def _losses(bucket, job_id) -> dict[int, float]:
    blob = bucket.get_blob(f"runs/{job_id}/metrics.jsonl")
    assert blob is not None, f"no metrics for job {job_id}"
    rows = [json.loads(line) for line in blob.download_as_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows}


def test_a_two_slice_job_survives_one_slice_preempted_and_matches_an_uninterrupted_run(
        cli, local_cloud, shared_emulator, project, tmp_path):
    bucket = local_bucket(shared_emulator, project, "ms")
    bucket_name = bucket.name

    def create(name: str, slices: int, queued: bool = False) -> None:
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.replace("NAME", name).replace("SLICES", str(slices)).replace("BUCKET", bucket_name)
                        .replace("QUEUED", str(queued).lower()))
        created = cli("create", spec)
        assert created.code == 0, created.err

    def requeue_until_ended(ms_id: int) -> dict[str, dict]:
        names = ["ms", "ms-one"]
        deadline = time.monotonic() + 600
        while True:
            assert cli("--debug", "requeue").code == 0
            if "ms-ref" not in names and "startup" in bucket_heartbeat(bucket, ms_id):
                create("ms-ref", 2)  # ms compiled the program: ms-ref's hosts read it
                names.append("ms-ref")
            jobs = {name: _show(cli, name) for name in names}
            if len(jobs) == 3 and all(j["state"] in ("SUCCEEDED", "FAILED") for j in jobs.values()):
                return jobs
            assert time.monotonic() < deadline, {n: [e["message"] for e in j["events"]][-8:] for n, j in jobs.items()}
            time.sleep(0.5)

    # The three jobs run side by side; ms-ref, which runs ms's program, from ms's first step on:
    # on a cold compile cache its four processes would otherwise compile it beside ms's four
    # (about 6 CPU-s each; JAX writes the entry from process 0 once compiled). The preempted one
    # has a 120 s notice (Google gives spot 30 s): a SIGTERM save that outlasts its notice (a
    # machine busy with other jobs' hosts) is cut short, and the next attempt starts over, as it
    # should; the hosts are down as soon as the save is done, so the long notice costs nothing.
    # The preempted job asks for its slices through one queued resource (Google's way), the
    # reference jobs as nodes made apart: both paths, one comparison.
    create("ms", 2, queued=True)
    create("ms-one", 1)
    shown = _show(cli, "ms")
    first = shown["attempts"][0]
    assert (first["slices"], first["nodes"]) == (2, [f"{first['slice_name']}-0", f"{first['slice_name']}-1"])

    def preempt_slice_1(step: int) -> tuple[int, dict]:  # in AtStep's thread: no CLI here
        # Slice 1 only: its hosts get the notice; every host stops at the same step (the
        # step's flags carry it) and saves; host 0, on slice 0, says so.
        local_cloud.preempt(node_ref(project, ZONE, f"{first['slice_name']}-1"), grace_seconds=120)
        return step, _status_when(bucket, shown["id"], lambda st: st["state"] != "running", timeout=120)

    # Once it trains, as its heartbeat in the bucket says (AtStep: not between sweeps).
    preempting = AtStep(bucket, shown["id"], 3, preempt_slice_1, timeout=240)
    jobs = requeue_until_ended(shown["id"])
    preempted_at, status = preempting.result()
    assert status["state"] == "preempted", status
    ms = jobs["ms"]

    for name, job in jobs.items():
        if job["state"] != "SUCCEEDED":
            pytest.fail(f"{name} {job['state']}:\n" + "\n".join(e["message"][:400] for e in job["events"]))
    assert [(a["number"], a["end_reason"], a["slices"]) for a in ms["attempts"]] == [
        (1, "preempted", 2), (2, "succeeded", 2)]
    # The queued resource was suspended whole: every slice lost (show --json, the timeline's
    # marks), unless a sweep read the program's status.json ("preempted") before the cloud's
    # word: the sweeps run beside the preemption, as cron's do, and the attempt then ends on the
    # program's word, naming no slice (test_multislice_sweep.py checks the names).
    assert ms["attempts"][0]["lost_slices"] in ([0, 1], []), ms["attempts"][0]
    second = ms["attempts"][1]
    assert second["slice_name"] != first["slice_name"]  # both slices made anew
    assert second["resumed_from_step"] == status["step"] >= preempted_at, [e["message"] for e in ms["events"]]
    # The preempted slice's node and the first attempt's other one are gone, and so, the job
    # done, are the second attempt's.
    from tpujob.cloud.tpu_api import GcpCloud

    listed = GcpCloud.for_emulator(shared_emulator["tpu_endpoint"]).list_slices(project, ZONE)
    assert not (set(first["nodes"]) | set(second["nodes"])) & set(listed), sorted(listed)

    # The runtime built its mesh over both slices (data parallel across them), the 1-slice job
    # over one.
    meshes = {n: bucket_heartbeat(bucket, jobs[n]["id"])["startup"]["mesh"] for n in ("ms", "ms-ref", "ms-one")}
    assert meshes == {"ms": {"slices": 2, "fsdp": 2}, "ms-ref": {"slices": 2, "fsdp": 2}, "ms-one": {"fsdp": 2}}

    resumed, reference, one = (_losses(bucket, jobs[n]["id"]) for n in ("ms", "ms-ref", "ms-one"))
    assert sorted(resumed) == sorted(reference) == list(range(1, STEPS + 1))
    assert resumed == reference  # to the last bit, the steps after the resume included
    for step in reference:
        assert one[step] == pytest.approx(reference[step], rel=ONE_SLICE_RTOL), step
