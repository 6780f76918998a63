"""`create` end to end against the emulator: real client, real SSH, real host filesystems."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SPEC = """\
name: {name}
tpu: {{accelerator: {accelerator}, zone: us-central2-b, queued: {queued}}}
run:
  command: {command}
"""


def write_spec(tmp_path, name="e2e", accelerator="v4-8", command="true", queued="true", extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, accelerator=accelerator, command=json.dumps(command),
                                queued=queued) + extra)
    return path


def nodes(client) -> list[str]:
    return [n["name"].rsplit("/", 1)[-1] for n in _api(client, "nodes")]


def queued_resources(client) -> list[str]:
    return [q["name"].rsplit("/", 1)[-1] for q in _api(client, "queuedResources")]


def _api(client, kind):
    import urllib.request

    url = f"{client.url}/v2/projects/tpujob-local/locations/us-central2-b/{kind}"
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read()).get(kind, [])


def job_slices(client, job_id: str) -> list[str]:
    prefix = f"tpujob-{job_id}-"
    return [n for n in nodes(client) + queued_resources(client) if n.startswith(prefix)]


def host_file(client, node: str, index: int, path: str) -> Path:
    root = Path(next(h["root"] for h in client.hosts(node) if h["index"] == index))
    return root / path.lstrip("/")


def show(cli, job):
    result = cli("show", "--json", job)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_one_host_job_runs_and_succeeds(cli, local_cloud, tmp_path):
    spec = write_spec(tmp_path, command='echo "hello $TPUJOB_HOST_INDEX/$TPUJOB_NUM_HOSTS" > /mnt/out.txt')
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    data = show(cli, "e2e")
    assert (data["state"], data["attempt"]) == ("SUCCEEDED", 1)
    slice_name = data["attempts"][0]["slice_name"]
    assert host_file(local_cloud, slice_name, 0, "/mnt/out.txt").read_text() == "hello 0/1\n"
    assert [e["to_state"] for e in data["events"] if e["to_state"]] == [
        "PENDING", "PROVISIONING", "SETTING_UP", "RUNNING", "SUCCEEDED"]
    assert cli("delete", data["id"]).code == 0
    assert job_slices(local_cloud, data["id"]) == []


def test_four_host_slice_runs_the_program_on_every_host(cli, local_cloud, tmp_path):
    spec = write_spec(tmp_path, accelerator="v5litepod-16", queued="false",
                      command="echo $TPUJOB_HOST_INDEX $TPUJOB_COORDINATOR > /mnt/who; echo home > $HOME/where")
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    data = show(cli, "e2e")
    slice_name = data["attempts"][0]["slice_name"]
    hosts = local_cloud.hosts(slice_name)
    assert len(hosts) == 4
    coordinator = f"{hosts[0]['ip']}:"
    for index in range(4):
        who = host_file(local_cloud, slice_name, index, "/mnt/who").read_text().split()
        assert who[0] == str(index) and who[1].startswith(coordinator)
        assert host_file(local_cloud, slice_name, index, "/home/tpujob/where").read_text() == "home\n"
    logs = Path(os.environ["TPUJOB_HOME"]) / "logs" / data["id"] / "attempt-1"
    assert sorted(p.name for p in logs.iterdir()) == [f"host-{i}.log" for i in range(4)]
    assert cli("delete", data["id"]).code == 0
    assert job_slices(local_cloud, data["id"]) == []


def test_a_failing_program_fails_the_job_and_frees_the_slice(cli, local_cloud, tmp_path):
    spec = write_spec(tmp_path, command="echo broken >&2; exit 3")
    result = cli("create", "--wait", spec)
    assert result.code == 7
    assert result.err.strip().splitlines()[-1] == "error: job 000001 ended FAILED (user_error)"
    data = show(cli, "e2e")
    assert (data["state"], data["end_reason"]) == ("FAILED", "user_error")
    assert data["attempts"][0]["end_reason"] == "failed"
    assert job_slices(local_cloud, data["id"]) == []  # quota is precious: nothing left behind


def test_cancel_keeps_the_slice_resume_reuses_it_delete_and_clean_leave_nothing(cli, local_cloud, tmp_path):
    spec = write_spec(tmp_path, command="echo $TPUJOB_ATTEMPT >> /mnt/attempts; sleep 600")
    assert cli("create", spec).code == 0
    data = show(cli, "e2e")
    assert data["state"] == "RUNNING"
    slice_name = data["attempts"][0]["slice_name"]

    assert cli("cancel", data["id"]).code == 0
    assert show(cli, "e2e")["state"] == "CANCELLED"
    assert job_slices(local_cloud, data["id"]) == [slice_name, slice_name]  # node + queued resource
    status = _status_on_host(local_cloud, slice_name, data["id"], 1)
    assert status in ("exited", "absent")

    assert cli("resume", data["id"]).code == 0
    data = show(cli, "e2e")
    assert data["state"] == "RUNNING" and data["attempt"] == 2
    assert data["attempts"][1]["slice_name"] == slice_name  # the healthy slice was reused
    assert host_file(local_cloud, slice_name, 0, "/mnt/attempts").read_text() == "1\n2\n"

    assert cli("delete", data["id"]).code == 0
    assert job_slices(local_cloud, data["id"]) == []
    logs = Path(os.environ["TPUJOB_HOME"]) / "logs" / data["id"]
    assert logs.exists()
    assert cli("clean", data["id"]).code == 0
    assert not logs.exists() and cli("show", data["id"]).code == 3


def _status_on_host(client, slice_name, job_id, attempt) -> str:
    root = Path(client.hosts(slice_name)[0]["root"])
    attempt_dir = root / "home" / "tpujob" / ".tpujob" / "jobs" / job_id / f"attempt-{attempt}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (attempt_dir / "exit_code").exists():
            return "exited"
        time.sleep(0.1)
    return "running" if (attempt_dir / "program.pid").exists() else "absent"


def test_values_full_of_shell_syntax_run_literally(cli, local_cloud, tmp_path):
    nasty = "it's \"quoted\"; $(touch /mnt/pwned) `touch /mnt/pwned2` & | > <\nsecond line"
    extra = "env:\n  NASTY: " + json.dumps(nasty) + "\n"
    command = "printf '%s' \"$NASTY\" > /mnt/nasty; echo 'a;b' $(echo c) > /mnt/cmd\necho line2 >> /mnt/cmd"
    spec = write_spec(tmp_path, name="quote-test", command=command, extra=extra)
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    slice_name = show(cli, "quote-test")["attempts"][0]["slice_name"]
    assert host_file(local_cloud, slice_name, 0, "/mnt/nasty").read_text() == nasty
    assert host_file(local_cloud, slice_name, 0, "/mnt/cmd").read_text() == "a;b c\nline2\n"
    assert not host_file(local_cloud, slice_name, 0, "/mnt/pwned").exists()
    assert not host_file(local_cloud, slice_name, 0, "/mnt/pwned2").exists()
    assert cli("delete", "quote-test").code == 0


def test_the_bundled_runtime_trains_on_an_emulated_host(cli, local_cloud, tmp_path):
    spec = tmp_path / "rt.yaml"
    spec.write_text("name: rt\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun:\n  runtime:\n"
                    "    model: tiny\n    steps: 12\n    batch_size: 8\n    seq_len: 64\n    checkpoint_every: 6\n")
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    slice_name = show(cli, "rt")["attempts"][0]["slice_name"]
    status = json.loads(host_file(local_cloud, slice_name, 0, "/home/tpujob/tpujob-runs/000001/status.json").read_text())
    assert (status["state"], status["step"], status["compiles"]) == ("succeeded", 12, 1)
    assert cli("delete", "rt").code == 0


def test_an_invalid_runtime_config_is_refused_before_anything_is_spent(cli, local_cloud, tmp_path, stored_jobs):
    spec = tmp_path / "rt.yaml"
    spec.write_text("name: rt\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun:\n  runtime:\n    stepz: 3\n")
    result = cli("create", spec)
    assert result.code == 2
    assert result.error_line.startswith("error: run.runtime.stepz (line 5): unknown key")
    assert stored_jobs() == 0


def test_a_sweep_records_the_steps_of_a_program_that_keeps_a_heartbeat(cli, local_cloud, tmp_path):
    beat = '{"time": 1, "step": 7, "phase": "training", "resumed_from": 4}'
    spec = write_spec(tmp_path, command=f"echo '{beat}' > \"$TPUJOB_RUN_DIR/heartbeat\"; sleep 600")
    assert cli("create", spec).code == 0
    time.sleep(0.5)
    assert cli("requeue").code == 0
    attempt = show(cli, "e2e")["attempts"][0]
    assert (attempt["last_step"], attempt["resumed_from_step"]) == (7, 4)
    assert cli("delete", "e2e").code == 0
