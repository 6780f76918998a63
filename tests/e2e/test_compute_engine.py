"""Jobs on Compute Engine TPU VMs (`tpu.api: compute`) against the emulator, through the CLI a
user runs: the bundled runtime to SUCCEEDED through a preemption (the same job on the Cloud TPU
API is tests/e2e/test_runtime_preemption.py, which also counts the steps lost), a flex-start job
that waits for capacity, then runs (one VM, and a 4-host MIG made at size 0, then resized), and a
reservation that does not exist ending the placement with Google's words."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from reconcile_helpers import DEMO_OPTIMIZER, AtStep, local_bucket

pytestmark = pytest.mark.slow

RUNTIME = """\
run_dir: gs://BUCKET/runs
requeue: {backoff_seconds: 0, min_run_seconds: 0, max_preemptions: 2, max_failures: 0}
run:
  runtime:
    model: tiny
    steps: STEPS
    batch_size: 8
    seq_len: 64
    checkpoint_every: EVERY
    log_every: 5
    heartbeat_every_s: 1
    sigterm_grace_s: 110   # the runtime's share of the 120 s notice below (its default, 25 s, is Spot's)
    optimizer: OPTIMIZER
""".replace("OPTIMIZER", DEMO_OPTIMIZER)
SLEEPER = """\
requeue: {backoff_seconds: 0, min_run_seconds: 0, max_failures: 0}
run: {command: 'sleep 600'}
"""
# Zones no other test uses: a stockout or a reservation here touches only these tests.
# api -> accelerator, zone, how the emulator names one VM, steps, checkpoint_every, the step
# after which it is preempted (seen in the heartbeat, read from the bucket: a sweep on a loaded
# machine takes seconds, and the program must not finish first). One host trains the tiny model
# fast and is saved by its SIGTERM checkpoint (1000: only that save and the final one; saves on
# gcsfuse are slow). Of a MIG's four
# flex-start VMs (bulk mode takes no spot) only one is lost, stopped: the others get no SIGTERM, so
# no collective save can be made and the periodic checkpoint is what attempt 2 resumes from.
APIS = {
    "compute": ("v6e-8", "us-east4-a", "projects/{project}/zones/{zone}/instances/{name}", 150, 1000, 1),
    "compute-4-hosts": ("v6e-16", "southamerica-east1-c", "projects/{project}/zones/{zone}/instances/{name}",
                        25, 10, 12),
}


def _show(cli, name: str) -> dict:
    result = cli("show", "--json", name)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _requeue_until(cli, name: str, done, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        result = cli("requeue")
        assert result.code == 0, result.err
        data = _show(cli, name)
        if done(data):
            return data
        assert time.monotonic() < deadline, json.dumps(data, indent=1)[-3000:]
        time.sleep(0.5)


def _create(cli, tmp_path, name: str, tpu: str, body: str) -> None:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"name: {name}\ntpu: {tpu}\n{body}")
    result = cli("create", spec)
    assert result.code == 0, result.err


@pytest.mark.timeout(900)
@pytest.mark.parametrize("api", sorted(APIS))
def test_the_runtime_succeeds_through_a_preemption_on_compute_engine(api, cli, local_cloud, shared_emulator, project,
                                                                 tmp_path):
    accelerator, zone, ref, steps, every, after = APIS[api]
    bucket = local_bucket(shared_emulator, project, "ce")
    name = f"ce-{api}"
    # A MIG's VMs are flex-start or reservation-bound (Google's bulk mode takes no other): flex-start.
    flex = ", provisioning: flex-start, max_run_duration: 2h" if api == "compute-4-hosts" else ""
    _create(cli, tmp_path, name, f"{{accelerator: {accelerator}, zone: {zone}, api: {api.split('-4')[0]}, "
                                 f"queued: false{flex}}}",
            RUNTIME.replace("BUCKET", bucket.name).replace("STEPS", str(steps)).replace("EVERY", str(every)))

    created = _show(cli, name)  # the attempt and its slice's name are recorded by create
    job_id, first = created["id"], created["attempts"][0]["slice_name"]

    def preempt(step: int) -> dict | None:  # in AtStep's thread: no CLI here (capsys is the test's)
        victim = first
        if api == "compute":  # a Compute Engine instance of the accelerator's machine type
            (vm,) = [i for i in _instances(local_cloud, project, zone) if i["name"] == first]
            assert vm["machineType"].endswith("/machineTypes/ct6e-standard-8t") and vm["status"] == "RUNNING"
        if api == "compute-4-hosts":  # the MIG's 4 VMs, each a ct6e-standard-4t; one is preempted
            vms = sorted(i["name"] for i in _instances(local_cloud, project, zone)
                         if i["name"].startswith(first + "-"))
            assert len(vms) == 4, vms
            victim = vms[2]
            # Once the periodic checkpoint is committed (an async save in flight when a VM dies is not).
            committed = f"runs/{job_id}/checkpoints/{every}/commit_success.txt"
            deadline = time.monotonic() + 120
            while bucket.get_blob(committed) is None:
                assert time.monotonic() < deadline, [b.name for b in bucket.list_blobs()]
                time.sleep(0.5)
        # Standard's 120 s notice, not Spot's 30 s, and the runtime told so (sigterm_grace_s): the
        # hosts are off once the save is done, so it costs nothing here, and a SIGTERM save beside
        # the heaviest tests (ten JAX processes on two cores) takes 25-30 s. With Spot's notice, or
        # the runtime's default 25 s of it, the save was cut short and no status.json was left (CI).
        if api == "compute-4-hosts":  # a flex-start VM is not preempted: lost to a stop (a host error)
            _stop(local_cloud, project, zone, victim)
        else:
            local_cloud.preempt(ref.format(project=project, zone=zone, name=victim), grace_seconds=120)
        status = bucket.get_blob(f"runs/{job_id}/status.json")  # the preemption blocks until the hosts are off
        return json.loads(status.download_as_bytes()) if status is not None else None

    # Once it trains, as its heartbeat in the bucket says (AtStep: not between sweeps).
    preempting = AtStep(bucket, job_id, after, preempt, timeout=480)
    _requeue_until(cli, name, lambda d: not preempting.is_alive() or d["state"] in ("SUCCEEDED", "FAILED"),
                   timeout=480)
    status = preempting.result()
    if every == 1000:  # one host: its VM reads preempted once the SIGTERM checkpoint is written
        assert status is not None and status["state"] == "preempted", status

    data = _requeue_until(cli, name, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=400)
    assert data["state"] == "SUCCEEDED", [e["message"] for e in data["events"]]
    # An attempt's end that is neither says why in the job's events (seen once under load: attempt
    # 2 ended no_capacity, and the third succeeded).
    assert [(a["number"], a["end_reason"]) for a in data["attempts"]] == [(1, "preempted"), (2, "succeeded")], \
        [e["message"] for e in data["events"]]
    assert data["attempts"][1]["slice_name"] != first
    assert data["attempts"][1]["resumed_from_step"] >= (1 if every == 1000 else every)
    # Every VM deleted: the preempted slice's and the one that finished.
    assert [i["name"] for i in _instances(local_cloud, project, zone)] == []


# A program whose SIGTERM save takes 4 s (as a checkpoint's write through gcsfuse does on a
# loaded host), then says so in the run dir and exits 75, the runtime contract's "preempted".
SAVER = """\
run_dir: gs://BUCKET/runs
requeue: {backoff_seconds: 0, min_run_seconds: 0, max_preemptions: 2, max_failures: 0}
run: {command: "trap 'sleep 4; echo saved > $TPUJOB_RUN_DIR/saved; exit 75' TERM; while :; do sleep 0.1; done"}
"""


def test_a_sweep_in_a_vms_preemption_notice_leaves_the_vm_to_its_save(cli, local_cloud, shared_emulator,
                                                                        project, tmp_path):
    """A sweep that lands in a preempted Spot VM's notice (cron sweeps every minute; Spot's
    notice is 30 s) sees the VM STOPPING. Deleting it then killed the program in its SIGTERM
    save, and the attempt after resumed from an older checkpoint. The VM is left to stop; the
    save lands; the attempt ends preempted once the VM reads TERMINATED."""
    zone = "asia-southeast1-b"  # offers v6e; no other test uses it
    bucket = local_bucket(shared_emulator, project, "stop")
    _create(cli, tmp_path, "saver", f"{{accelerator: v6e-8, zone: {zone}, api: compute, queued: false}}",
            SAVER.replace("BUCKET", bucket.name))
    data = _requeue_until(cli, "saver", lambda d: d["state"] == "RUNNING", timeout=120)
    vm = data["attempts"][0]["slice_name"]
    ref = f"projects/{project}/zones/{zone}/instances/{vm}"
    preempting = threading.Thread(target=local_cloud.preempt, args=(ref,), kwargs={"grace_seconds": 30})
    preempting.start()   # returns once the VM's hosts are down: the 4 s save, then TERMINATED
    deadline = time.monotonic() + 10
    while [i["status"] for i in _instances(local_cloud, project, zone) if i["name"] == vm] != ["STOPPING"]:
        assert time.monotonic() < deadline, _instances(local_cloud, project, zone)
        time.sleep(0.05)
    assert cli("requeue").code == 0   # in the notice
    seen = _show(cli, "saver")
    assert (seen["state"], seen["attempts"][0]["end_reason"]) == ("RUNNING", None), seen["events"][-3:]
    assert seen["events"][-1]["message"].startswith("VM stopping (a preemption notice): its program may be saving")
    assert [i["status"] for i in _instances(local_cloud, project, zone) if i["name"] == vm] == ["STOPPING"]
    preempting.join(timeout=60)
    assert bucket.blob(f"runs/{data['id']}/saved").download_as_text() == "saved\n"
    data = _requeue_until(cli, "saver", lambda d: d["attempt"] == 2, timeout=60)
    assert data["attempts"][0]["end_reason"] == "preempted"
    assert vm not in {i["name"] for i in _instances(local_cloud, project, zone)}
    assert cli("cancel", "saver").code == 0


def test_a_flex_start_job_waits_for_capacity_then_runs(cli, local_cloud, project, tmp_path,
                                                       monkeypatch):
    monkeypatch.setenv("TPUJOB_QUEUE_FOLLOW_SECONDS", "1")  # create hands the waiting VM to the sweeps
    zone = "asia-south1-b"
    local_cloud.stockout(zone, "ct6e-standard-8t")
    try:
        _create(cli, tmp_path, "flex", f"{{accelerator: v6e-8, zone: {zone}, api: compute, provisioning: flex-start, "
                                       "max_run_duration: 2h}", SLEEPER)
        assert cli("requeue").code == 0
        for _ in range(3):   # sweeps pass while the VM waits: nothing ends, nothing is made twice
            assert cli("requeue").code == 0
            data = _show(cli, "flex")
            assert (data["state"], data["attempt"]) == ("PROVISIONING", 1), data["events"][-3:]
    finally:
        local_cloud.stockout(zone, "ct6e-standard-8t", clear=True)
    data = _requeue_until(cli, "flex", lambda d: d["state"] == "RUNNING", timeout=60)
    assert [a["end_reason"] for a in data["attempts"]] == [None]


def test_a_multi_host_flex_start_job_waits_for_capacity_then_runs(cli, local_cloud, project, tmp_path,
                                                                  monkeypatch):
    """A v6e-16 flex-start slice: a BULK MIG made at size 0, resized to its 4 hosts, whose VMs
    wait PENDING while the machine type is stocked out, then come up and run the job."""
    monkeypatch.setenv("TPUJOB_QUEUE_FOLLOW_SECONDS", "1")  # create hands the waiting MIG to the sweeps
    zone = "asia-south1-c"
    local_cloud.stockout(zone, "ct6e-standard-4t")
    try:
        _create(cli, tmp_path, "flex4", f"{{accelerator: v6e-16, zone: {zone}, api: compute, "
                                        "provisioning: flex-start, max_run_duration: 2h}", SLEEPER)
        assert cli("requeue").code == 0
        for _ in range(3):   # sweeps pass while the MIG waits: nothing ends, nothing is made twice
            assert cli("requeue").code == 0
            data = _show(cli, "flex4")
            assert (data["state"], data["attempt"]) == ("PROVISIONING", 1), data["events"][-3:]
        waiting = [i for i in _instances(local_cloud, project, zone)
                   if i["name"].startswith(data["attempts"][0]["slice_name"] + "-")]
        assert len(waiting) == 4 and {i["status"] for i in waiting} == {"PENDING"}, waiting
    finally:
        local_cloud.stockout(zone, "ct6e-standard-4t", clear=True)
    data = _requeue_until(cli, "flex4", lambda d: d["state"] == "RUNNING", timeout=120)
    assert [a["end_reason"] for a in data["attempts"]] == [None]
    assert {i["status"] for i in _instances(local_cloud, project, zone)} == {"RUNNING"}


def test_a_reservation_that_does_not_exist_ends_the_placement_with_its_message(cli, local_cloud, project,
                                                                                tmp_path):
    zone = "us-east4-b"
    _create(cli, tmp_path, "resv", f"{{accelerator: v6e-8, zone: {zone}, api: compute, provisioning: reservation, "
                                   "reservation: nope}", SLEEPER)
    data = _requeue_until(cli, "resv", lambda d: d["attempts"] and d["attempts"][0]["end_reason"], timeout=60)
    said = " ".join(e["message"] for e in data["events"])
    assert "Specified reservation 'nope' does not exist" in said, said
    assert data["attempts"][0]["slice_name"] not in {r["name"] for r in _instances(local_cloud, project, zone)}


DISK_ZONE = "us-east1-d"  # offers v6e; no other test uses it
MASTER = f"""\
tpu: {{accelerator: v6e-8, zone: {DISK_ZONE}, api: compute}}
disks:
  - {{name: cemaster, mode: read-write, mount: /mnt/master, type: hyperdisk-balanced}}
run:
  command: "mkdir -p /mnt/master/ds && echo shard-0 > /mnt/master/ds/train.txt"
"""
POD = f"""\
tpu: {{accelerator: v6e-16, zone: {DISK_ZONE}, api: compute, provisioning: flex-start, max_run_duration: 2h}}
disks:
  - {{name: cedata, snapshot: cemaster-snap, mode: read-only, mount: /mnt/data}}
run:
  command: "cat /mnt/data/ds/train.txt > $HOME/seen; touch /mnt/data/new 2> $HOME/err; echo $? > $HOME/rc; sleep 600"
"""


def test_clone_and_scale_on_compute_engine_a_master_on_one_vm_its_clone_on_every_vm_of_a_mig(
        cli, local_cloud, project, tmp_path):
    """A master disk written read-write by a one-VM job, snapshotted, cloned for a v6e-16 job
    whose MIG's template names the clone: every VM reads it, none can write it, and the job's
    delete takes the MIG's VMs and then the clone."""
    spec = tmp_path / "cemaster.yaml"
    spec.write_text("name: cemaster\n" + MASTER)
    result = cli("create", "--wait", spec)
    assert result.code == 0, result.err
    assert _show(cli, "cemaster")["state"] == "SUCCEEDED"
    assert cli("disk", "snapshot", "cemaster", "--name", "cemaster-snap", "--zone", DISK_ZONE).code == 0

    _create(cli, tmp_path, "cepod", POD.split("\n", 1)[0].split(": ", 1)[1], POD.split("\n", 1)[1])
    data = _requeue_until(cli, "cepod", lambda d: d["state"] in ("RUNNING", "FAILED"), timeout=240)
    assert data["state"] == "RUNNING", [e["message"] for e in data["events"]]
    first = data["attempts"][0]["slice_name"]
    vms = sorted(i["name"] for i in _instances(local_cloud, project, DISK_ZONE) if i["name"].startswith(first + "-"))
    assert len(vms) == 4, vms
    from tpujob.names import clone_name
    from tpujob.service.context import Context

    clone = clone_name("cedata", int(data["id"]), Context.load().store.store_tag)
    listed = cli("disk", "list", "--zone", DISK_ZONE, "--json")
    assert listed.code == 0, listed.err
    (disk,) = [d for d in json.loads(listed.out) if d["name"] == clone]
    assert (disk["source_snapshot"], sorted(disk["users"])) == ("cemaster-snap", vms)
    for vm in vms:  # every VM reads the same file; a write fails read-only
        root = Path(local_cloud.hosts(f"projects/{project}/zones/{DISK_ZONE}/instances/{vm}")[0]["root"])
        deadline = time.monotonic() + 60
        while not (root / "home/tpujob/rc").exists():
            assert time.monotonic() < deadline, vm
            time.sleep(0.2)
        assert (root / "home/tpujob/seen").read_text() == "shard-0\n"
        assert (root / "home/tpujob/rc").read_text() == "1\n"
        assert "Read-only file system" in (root / "home/tpujob/err").read_text()

    assert cli("delete", "cepod").code == 0
    listed = cli("disk", "list", "--zone", DISK_ZONE, "--json")
    assert clone not in {d["name"] for d in json.loads(listed.out)}
    assert [i["name"] for i in _instances(local_cloud, project, DISK_ZONE)] == []
    assert cli("delete", "cemaster").code == 0
    assert cli("disk", "delete", "cemaster", "--zone", DISK_ZONE).code == 0


def _stop(client, project: str, zone: str, name: str) -> None:
    """instances.stop (compute.v1): the VM is TERMINATED with no preemption recorded."""
    import urllib.request

    request = urllib.request.Request(f"{client.url}/compute/v1/projects/{project}/zones/{zone}/instances/{name}/stop",
                                     data=b"", method="POST")
    with urllib.request.urlopen(request) as answer:
        answer.read()


def _instances(client, project: str, zone: str) -> list[dict]:
    import urllib.request

    with urllib.request.urlopen(f"{client.url}/compute/v1/projects/{project}/zones/{zone}/instances") as answer:
        return json.loads(answer.read()).get("items", [])
