"""Clone and scale end to end with the CLI against the emulator: a master written read-write on
one host, snapshotted, cloned, attached read-only to a 4-host slice; refusals; the clone's
life with the job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

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
tpu: {{accelerator: v5litepod-16, zone: {ZONE}, queued: false}}
disks:
  - {{name: {{disk}}, {{source}} mode: read-only, mount: /mnt/data, type: pd-balanced{{keep}}}}
run:
  command: "cat /mnt/data/ds/train.txt > $HOME/seen; touch /mnt/data/new 2> $HOME/err; echo $? > $HOME/rc; sleep 600"
"""


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
    root = Path(next(h["root"] for h in client.hosts(node) if h["index"] == index))
    return root / path.lstrip("/")


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


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
    clone = disks(cli)["data"]
    assert (clone["source_snapshot"], clone["users"]) == ("master-snap", [node])
    for index in range(4):  # every host reads the same files; a write fails read-only
        wait_for(lambda: host_file(local_cloud, node, index, "/home/tpujob/rc").exists())
        assert host_file(local_cloud, node, index, "/home/tpujob/seen").read_text() == "shard-0\n"
        assert host_file(local_cloud, node, index, "/home/tpujob/rc").read_text() == "1\n"
        assert "Read-only file system" in host_file(local_cloud, node, index, "/home/tpujob/err").read_text()

    # Preempted and re-queued: the same clone goes to the new slice.
    local_cloud.preempt(node)
    wait_for(lambda: cli("requeue").code == 0 and show(cli, "pod")["attempt"] == 2
             and show(cli, "pod")["state"] == "RUNNING", timeout=60)
    second = show(cli, "pod")["attempts"][-1]["slice_name"]
    again = disks(cli)["data"]
    assert (again["users"], again["source_snapshot"]) == ([second], "master-snap")
    wait_for(lambda: host_file(local_cloud, second, 3, "/home/tpujob/seen").exists())
    assert host_file(local_cloud, second, 3, "/home/tpujob/seen").read_text() == "shard-0\n"

    assert cli("delete", "pod").code == 0
    assert "data" not in disks(cli)
    assert cli("delete", "dev").code == 0
    assert cli("disk", "delete", "master", "--zone", ZONE).code == 0


def test_keep_true_keeps_the_clone_and_refusals_spend_nothing(cli, local_cloud, tmp_path, stored_jobs):
    wrong_type = pod_spec(tmp_path, source="snapshot: any,")
    wrong_type.write_text(wrong_type.read_text().replace("pd-balanced", "pd-standard"))  # v5e
    refused = cli("create", wrong_type)
    assert refused.code == 2 and "pd-standard" in refused.error_line
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
    assert disks(cli)["kept"]["source_snapshot"] == "kept-src-000002"
    for name in ("kept", "seed"):
        assert cli("disk", "delete", name, "--zone", ZONE).code == 0
