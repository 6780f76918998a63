"""Clone and scale end to end with the CLI against the emulator: a master written read-write on
one host, snapshotted, cloned, attached read-only to a 4-host slice; refusals; the clone's
life with the job."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from reconcile_helpers import node_ref

from tpujob.names import clone_name, snapshot_name, store_tag

# A project of its own on the shared emulator: every test's disks, snapshots and slices have the
# same names, and what a failed test left behind must not be found by the next one.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("project")]

ZONE = "us-central2-b"
MASTER = f"""\
name: dev
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
disks:
  - {{name: master, mode: read-write, mount: /mnt/master}}
run:
  command: "mkdir -p /mnt/master/ds && echo shard-0 > /mnt/master/ds/train.txt"
"""
POD = f"""\
name: pod
tpu: {{accelerator: v4-32, zone: {ZONE}, queued: false}}
disks:
  - {{name: {{disk}}, {{source}} mode: read-only, mount: /mnt/data, type: pd-balanced{{keep}}}}
run:
  command: "cat /mnt/data/ds/train.txt > $HOME/seen; touch /mnt/data/new 2> $HOME/err; echo $? > $HOME/rc; sleep 600"
"""


def _node(name: str) -> str:
    return node_ref(os.environ["TPUJOB_PROJECT"], ZONE, name)


def pod_spec(tmp_path, disk="data", source="snapshot: master-snap,", keep=""):
    path = tmp_path / f"pod-{disk}.yaml"
    path.write_text(POD.replace("{disk}", disk).replace("{source}", source).replace("{keep}", keep))
    return path


def show(cli, ref):
    result = cli("show", "--json", ref)
    assert result.code == 0, result.err
    return json.loads(result.out)


def disks(cli) -> dict:
    result = cli("disk", "list", "--zone", ZONE, "--json")
    assert result.code == 0, result.err
    return {d["name"]: d for d in json.loads(result.out)}


def host_file(client, node, index, path) -> Path:
    root = Path(next(h["root"] for h in client.hosts(_node(node)) if h["index"] == index))
    return root / path.lstrip("/")


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.timeout(400)  # about 45 s here
def test_clone_and_scale(cli, local_cloud, tmp_path, stored_jobs):
    master = tmp_path / "dev.yaml"
    master.write_text(MASTER)
    result = cli("create", "--wait", "--keep-slice", master)
    assert result.code == 0, result.err
    dev = show(cli, "dev")
    assert dev["state"] == "SUCCEEDED"
    assert disks(cli)["master"]["users"] == [dev["attempts"][0]["slice_name"]]

    # The master, held read-write by the dev slice, cannot go to the pod as it is.
    before = stored_jobs()
    refused = cli("create", pod_spec(tmp_path, disk="master", source=""))
    assert refused.code == 2 and "attached read-write" in refused.error_line
    assert stored_jobs() == before

    assert cli("disk", "snapshot", "master", "--name", "master-snap", "--zone", ZONE).code == 0
    result = cli("create", pod_spec(tmp_path))
    assert result.code == 0, result.err
    pod = show(cli, "pod")
    assert pod["state"] == "RUNNING"
    node = pod["attempts"][0]["slice_name"]
    clone_of_pod = clone_name("data", int(pod["id"]), store_tag(_store_id()))
    clone = disks(cli)[clone_of_pod]  # the job's own clone
    assert (clone["source_snapshot"], clone["users"]) == ("master-snap", [node])
    assert clone["labels"] == {"tpujob-job": pod["id"], "tpujob-store": _store_id()}
    for index in range(4):  # every host reads the same files; a write fails read-only
        wait_for(lambda index=index: host_file(local_cloud, node, index, "/home/tpujob/rc").exists())
        assert host_file(local_cloud, node, index, "/home/tpujob/seen").read_text() == "shard-0\n"
        assert host_file(local_cloud, node, index, "/home/tpujob/rc").read_text() == "1\n"
        assert "Read-only file system" in host_file(local_cloud, node, index, "/home/tpujob/err").read_text()

    # Preempted and re-queued: the same clone goes to the new slice.
    local_cloud.preempt(_node(node))
    wait_for(lambda: cli("requeue").code == 0 and show(cli, "pod")["attempt"] == 2
             and show(cli, "pod")["state"] == "RUNNING", timeout=60)
    second = show(cli, "pod")["attempts"][-1]["slice_name"]
    again = disks(cli)[clone_of_pod]
    assert (again["users"], again["source_snapshot"]) == ([second], "master-snap")
    wait_for(lambda: host_file(local_cloud, second, 3, "/home/tpujob/seen").exists())
    assert host_file(local_cloud, second, 3, "/home/tpujob/seen").read_text() == "shard-0\n"

    assert cli("delete", "pod").code == 0
    assert clone_of_pod not in disks(cli)
    assert cli("delete", "dev").code == 0
    assert cli("disk", "delete", "master", "--zone", ZONE).code == 0


def test_keep_true_keeps_the_clone_and_refusals_spend_nothing(cli, local_cloud, tmp_path, stored_jobs):
    wrong_type = pod_spec(tmp_path, source="snapshot: any,")
    wrong_type.write_text(wrong_type.read_text().replace("pd-balanced", "hyperdisk-ml"))  # v4
    refused = cli("create", wrong_type)
    assert refused.code == 2 and "hyperdisk-ml" in refused.error_line
    rw = tmp_path / "rw.yaml"
    rw.write_text(MASTER.replace("v4-8", "v4-32"))
    refused = cli("create", rw)
    assert refused.code == 2 and "read-write" in refused.error_line
    assert stored_jobs() == 0

    seed = tmp_path / "seed.yaml"
    seed.write_text(MASTER.replace("master", "seed").replace("name: dev", "name: seed"))
    assert cli("create", "--wait", seed).code == 0
    spec = pod_spec(tmp_path, disk="kept", source="source_disk: seed,", keep=", keep: true")
    spec.write_text(spec.read_text().replace("sleep 600", "true"))
    assert cli("create", "--wait", spec).code == 0
    assert cli("delete", "pod").code == 0
    tag = store_tag(_store_id())
    assert disks(cli)[clone_name("kept", 2, tag)]["source_snapshot"] == snapshot_name("kept", 2, tag)
    for name in (clone_name("kept", 2, tag), "seed"):
        assert cli("disk", "delete", name, "--zone", ZONE).code == 0


ONE_HOST = f"""\
name: small
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
disks:
  - {{name: shard, snapshot: shard-snap, mode: read-only, mount: /mnt/shard}}
run:
  command: "cat /mnt/shard/ds/train.txt > $HOME/seen; sleep 600"
"""


def test_two_jobs_from_one_spec_each_get_their_own_clone(cli, local_cloud, tmp_path):
    seed = tmp_path / "seed.yaml"
    seed.write_text(MASTER.replace("master", "shardsrc").replace("name: dev", "name: shardsrc"))
    assert cli("create", "--wait", seed).code == 0
    assert cli("disk", "snapshot", "shardsrc", "--name", "shard-snap", "--zone", ZONE).code == 0
    spec = tmp_path / "small.yaml"
    spec.write_text(ONE_HOST)
    first, second = (json.loads(cli("create", "--json", spec).out)["id"] for _ in range(2))
    both = disks(cli)
    tag = store_tag(_store_id())

    def clone_of(jid: str) -> str:
        return clone_name("shard", int(jid), tag)

    for jid in (first, second):
        job = show(cli, jid)
        assert job["state"] == "RUNNING"
        clone = both[clone_of(jid)]
        assert clone["users"] == [job["attempts"][0]["slice_name"]]
        assert clone["labels"] == {"tpujob-job": jid, "tpujob-store": _store_id()}
        node = job["attempts"][0]["slice_name"]
        wait_for(lambda node=node: host_file(local_cloud, node, 0, "/home/tpujob/seen").exists())
        assert host_file(local_cloud, node, 0, "/home/tpujob/seen").read_text() == "shard-0\n"

    # Deleting the first job deletes its clone only; the second keeps its data.
    assert cli("delete", first).code == 0
    left = disks(cli)
    assert clone_of(first) not in left and left[clone_of(second)]["users"]
    assert cli("delete", second).code == 0
    assert clone_of(second) not in disks(cli)
    assert cli("delete", "shardsrc").code == 0
    assert cli("disk", "delete", "shardsrc", "--zone", ZONE).code == 0


BUCKETED = f"""\
name: shared
tpu: {{accelerator: v4-32, zone: {ZONE}, queued: false}}
buckets:
  - {{bucket: shared-data, mount: /mnt/shared, metadata_ttl_secs: 0, cache_dir: /tmp/gcsfuse-cache,
     file_cache_max_size_mb: 64}}
  - {{bucket: far-data, mount: /mnt/far, read_only: true}}
run_dir: gs://shared-runs/exp
run:
  command: |
    if [ "$TPUJOB_HOST_INDEX" = 0 ]; then echo from-host-0 > /mnt/shared/hello.txt; fi
    # -s, not -f: the create's truncate may reach the bucket before the line does (seen once
    # under load: a host read the empty object). 2 min: a loaded CI.
    for i in $(seq 600); do [ -s /mnt/shared/hello.txt ] && break; sleep 0.2; done
    cat /mnt/shared/hello.txt > "$HOME/seen"
    if [ "$TPUJOB_HOST_INDEX" = 0 ]; then
      printf '{{"time": 0, "step": 42, "phase": "exiting"}}' > "$TPUJOB_RUN_DIR/heartbeat"
      printf '{{"state": "succeeded", "step": 42, "message": "all done"}}' > "$TPUJOB_RUN_DIR/status.json"
    fi
"""


def test_buckets_on_every_host_the_run_dir_and_the_region_check(cli, local_cloud, shared_emulator, tmp_path,
                                                                stored_jobs):
    import requests

    from tpujob.clients import make_storage
    from tpujob.service.context import Context

    gcs = make_storage(Context.load().settings)
    endpoint = shared_emulator["storage_endpoint"]
    for name in ("shared-data", "shared-runs", "far-data"):
        if gcs.lookup_bucket(name) is None:
            gcs.create_bucket(name)
    # The emulator makes every bucket in US; this one moves to Europe: far from us-central2.
    assert requests.patch(f"{endpoint}/storage/v1/b/far-data", json={"location": "EUROPE-WEST4"},
                          timeout=10).ok
    spec = tmp_path / "shared.yaml"
    spec.write_text(BUCKETED)

    refused = cli("create", "--strict", spec)
    assert refused.code == 2 and "bucket far-data is in EUROPE-WEST4" in refused.error_line
    assert stored_jobs() == 0

    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    warnings = [line for line in result.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "far-data" in warnings[0] and "egress" in warnings[0]
    job = show(cli, "shared")
    assert job["state"] == "SUCCEEDED"
    node = job["attempts"][0]["slice_name"]
    for index in range(4):  # written by host 0, read by every host through its own mount
        assert host_file(local_cloud, node, index, "/home/tpujob/seen").read_text() == "from-host-0\n"
    assert gcs.bucket("shared-data").blob("hello.txt").download_as_text() == "from-host-0\n"
    status = json.loads(gcs.bucket("shared-runs").blob(f"exp/{job['id']}/status.json").download_as_text())
    assert status["step"] == 42

    # show reports the run dir read through GCS: status.json as the program wrote it.
    run = job["run_dir"]
    assert (run["url"], run["state"], run["step"], run["message"]) == (
        f"gs://shared-runs/exp/{job['id']}", "succeeded", 42, "all done")
    assert 0 <= run["heartbeat_age_seconds"] < 120
    text = cli("show", "shared")
    assert text.code == 0 and "succeeded at step 42: all done" in text.out
    assert "heartbeat:" in text.out and " ago" in text.out
    assert cli("delete", "shared").code == 0


def _store_id() -> str:
    """This test's store's id: the `tpujob-store` label on what its jobs create."""
    from tpujob.service.context import Context
    from tpujob.store.identity import store_id

    return store_id(Context.load().engine)
