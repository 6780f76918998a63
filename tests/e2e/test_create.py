"""`create` end to end against the emulator: real client, real SSH, real host filesystems."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reconcile_helpers import DEMO_OPTIMIZER

# Each test in a project of its own on the shared emulator: its job ids, and so its slice names,
# start at 000001 like every other test's, and a slice a failed test left behind must not be
# adopted by the next one.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("project")]

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

    url = f"{client.url}/v2/{_location()}/{kind}"
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read()).get(kind, [])


def job_slices(client, job_id: str) -> list[str]:
    """The job's slices (queued resources and nodes), by the name tpujob/names.py derives
    (tpujob-TAG-JOBID-ATTEMPT, whatever the store's tag)."""
    prefix = re.compile(rf"^tpujob-[0-9a-f]{{6}}-{job_id}-")
    return [n for n in nodes(client) + queued_resources(client) if prefix.match(n)]


def _location() -> str:
    return f"projects/{os.environ['TPUJOB_PROJECT']}/locations/us-central2-b"


def host_file(client, node: str, index: int, path: str) -> Path:
    hosts = client.hosts(f"{_location()}/nodes/{node}")
    root = Path(next(h["root"] for h in hosts if h["index"] == index))
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


def test_json_output_has_no_progress_lines(cli, local_cloud, tmp_path):
    result = cli("create", "--wait", "--json", write_spec(tmp_path, name="quiet"))
    assert result.code == 0, result.err
    assert json.loads(result.out)["state"] == "SUCCEEDED"
    assert "hosts done" not in result.out + result.err


def test_four_host_slice_runs_the_program_on_every_host(cli, local_cloud, tmp_path):
    spec = write_spec(tmp_path, accelerator="v4-32", queued="false",
                      command="echo $TPUJOB_HOST_INDEX $TPUJOB_COORDINATOR > /mnt/who; echo home > $HOME/where")
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    data = show(cli, "e2e")
    slice_name = data["attempts"][0]["slice_name"]
    hosts = local_cloud.hosts(f"{_location()}/nodes/{slice_name}")
    assert len(hosts) == 4
    for step in ("setup start", "launch"):   # the live progress line, as plain lines off a terminal
        assert f"  {step}: 4/4 hosts done\n" in result.err
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
    root = Path(client.hosts(f"{_location()}/nodes/{slice_name}")[0]["root"])
    attempt_dir = root / "home" / "tpujob" / ".tpujob" / "jobs" / job_id / f"attempt-{attempt}"
    # Waits for the program to be over (its exit code written, or it never started); the
    # deadline only bounds a hang, where 10 s once read a slow stop under load as "running".
    deadline = time.monotonic() + 120
    while True:
        if (attempt_dir / "exit_code").exists():
            return "exited"
        if not (attempt_dir / "program.pid").exists():
            return "absent"
        if time.monotonic() > deadline:
            return "running"
        time.sleep(0.1)


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
                    "    model: tiny\n    steps: 12\n    batch_size: 8\n    seq_len: 64\n    checkpoint_every: 6\n"
                    f"    optimizer: {DEMO_OPTIMIZER}\n")
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    slice_name = show(cli, "rt")["attempts"][0]["slice_name"]
    status = json.loads(host_file(local_cloud, slice_name, 0,
                                  "/home/tpujob/tpujob-runs/000001/status.json").read_text())
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


SECRET_SPEC = """\
name: {name}
tpu: {{accelerator: v4-16, zone: us-central2-b, queued: false}}
secrets: [API_TOKEN]
setup: printf '%s' "$API_TOKEN" > /mnt/setup-secret
run:
  command: {command}
"""


def _secret_spec(tmp_path, name, command):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SECRET_SPEC.format(name=name, command=json.dumps(command)))
    return path


def _files_holding(root: Path, needle: str, skip=()) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.name not in skip
            and needle.encode() in p.read_bytes()]


def test_a_secret_reaches_every_host_and_nothing_else(cli, local_cloud, tmp_path, monkeypatch, tpujob_home):
    value = f"s3cret-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("API_TOKEN", value)
    command = 'printf "%s" "$API_TOKEN" > /mnt/secret; while [ ! -f /mnt/stop ]; do sleep 0.1; done'
    result = cli("create", "--keep-slice", _secret_spec(tmp_path, "secret", command))
    assert result.code == 0, result.err
    assert "setup start: 2/2 hosts done" in result.err and "launch: 2/2 hosts done" in result.err
    data = show(cli, "secret")
    node = data["attempts"][0]["slice_name"]
    # From here on, as under cron: the shell's variable is gone, and no sweep needs it.
    monkeypatch.delenv("API_TOKEN")
    for index in range(2):
        assert host_file(local_cloud, node, index, "/mnt/secret").read_text() == value
        assert host_file(local_cloud, node, index, "/mnt/setup-secret").read_text() == value
    assert cli("requeue").code == 0
    assert show(cli, "secret")["state"] == "RUNNING"   # status needs no secret
    for index in range(2):
        host_file(local_cloud, node, index, "/mnt/stop").touch()
    deadline = time.monotonic() + 20
    while show(cli, "secret")["state"] != "SUCCEEDED":
        assert time.monotonic() < deadline, show(cli, "secret")["events"][-3:]
        assert cli("requeue").code == 0
        time.sleep(0.2)
    shown = cli("show", "--json", "secret")
    assert value not in shown.out + shown.err
    assert _files_holding(tpujob_home, value) == []   # the store (db, wal) and tpujob's logs
    for index in range(2):
        root = Path(next(h["root"] for h in local_cloud.hosts(f"{_location()}/nodes/{node}") if h["index"] == index))
        assert _files_holding(root, value, skip=("secret", "setup-secret")) == []
    assert cli("delete", "secret").code == 0


def test_create_refuses_a_secret_it_has_no_value_for(cli, local_cloud, tmp_path, monkeypatch, stored_jobs,
                                                      tpujob_home):
    monkeypatch.delenv("API_TOKEN", raising=False)
    spec = _secret_spec(tmp_path, "nosecret", "true")
    result = cli("create", spec)
    assert result.code == 6
    assert result.error_line == (f"error: secret API_TOKEN not set: export it or put it in "
                                 f"{tpujob_home / 'secrets.env'} (KEY=VALUE lines, mode 600)")
    tpujob_home.mkdir(parents=True, exist_ok=True)
    (tpujob_home / "secrets.env").write_text("API_TOKEN=x\n")
    (tpujob_home / "secrets.env").chmod(0o644)
    result = cli("create", spec)
    assert result.code == 6 and "readable by group or others (mode 644)" in result.error_line
    assert stored_jobs() == 0 and job_slices(local_cloud, "000001") == []


def test_cancel_needs_no_secret_and_a_relaunch_without_one_fails_its_setup(cli, local_cloud, tmp_path,
                                                                          monkeypatch, tpujob_home):
    monkeypatch.setenv("API_TOKEN", "from-the-shell")
    command = 'printf "%s\\n" "$API_TOKEN" >> /mnt/seen; sleep 600'
    assert cli("create", _secret_spec(tmp_path, "relaunch", command)).code == 0
    node = show(cli, "relaunch")["attempts"][0]["slice_name"]
    seen = host_file(local_cloud, node, 0, "/mnt/seen")
    deadline = time.monotonic() + 10
    while not seen.exists() or seen.read_text() != "from-the-shell\n":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    monkeypatch.delenv("API_TOKEN")
    result = cli("cancel", "relaunch")
    assert result.code == 0, result.err
    # A relaunch with no value anywhere: the attempt ends setup_failed, no retry loop.
    result = cli("resume", "relaunch")
    data = show(cli, "relaunch")
    assert (data["state"], data["end_reason"]) == ("FAILED", "setup_failed"), data["events"][-4:]
    assert data["attempts"][-1]["end_reason"] == "setup_failed"
    assert any("setup failed: secret API_TOKEN not set" in e["message"] for e in data["events"])
    # Unattended runs read it from $TPUJOB_HOME/secrets.env (mode 600).
    (tpujob_home / "secrets.env").write_text("API_TOKEN='from-the-file'\n")
    (tpujob_home / "secrets.env").chmod(0o600)
    assert cli("resume", "relaunch").code == 0
    data = show(cli, "relaunch")
    assert data["state"] == "RUNNING"
    seen = host_file(local_cloud, data["attempts"][-1]["slice_name"], 0, "/mnt/seen")  # a new slice
    deadline = time.monotonic() + 10
    while not seen.exists() or seen.read_text() != "from-the-file\n":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert cli("delete", "relaunch").code == 0


def test_a_setup_past_its_timeout_fails_the_attempt_and_a_sweep_beside_it_starts_none(cli, local_cloud, tmp_path,
                                                                                   monkeypatch):
    """The setup runs detached on the hosts: the sweep that started it holds no lease while it
    runs, and another sweep meanwhile (cron beside `create`) finds it running and starts no
    second one; the host's own timeout still ends it."""
    import threading

    from tpujob.reconcile.policy import Policy

    monkeypatch.setattr(Policy, "setup_timeout", lambda self, hosts: 3.0)
    beside = {}

    def sweep_beside():  # another process, as cron's would be
        time.sleep(2.0)   # inside the 3 s setup
        done = subprocess.run([sys.executable, "-m", "tpujob.cli.main", "requeue"], capture_output=True,
                              text=True, env=dict(os.environ), timeout=60)
        beside["code"] = done.returncode

    thread = threading.Thread(target=sweep_beside)
    thread.start()
    spec = write_spec(tmp_path, name="slowsetup", extra="setup: echo started; sleep 30\n")
    result = cli("create", "--wait", spec)
    thread.join()
    assert beside == {"code": 0}
    assert result.code == 7
    data = show(cli, "slowsetup")
    assert (data["state"], data["end_reason"]) == ("FAILED", "setup_failed")
    assert len(data["attempts"]) == 1
    # Whichever sweep saw it end words it (the one beside does not have this test's 3 s patched in).
    timed_out = [e["message"] for e in data["events"] if "setup on host 0 timed out after " in e["message"]]
    assert len(timed_out) == 1, "\n".join(e["message"] for e in data["events"])
    running = [e["message"] for e in data["events"] if e["message"].startswith("setup running on 1 of 1 hosts")]
    assert len(running) == 1, [e["message"] for e in data["events"]]


def test_a_workdir_under_the_home_is_expanded_and_taken_literally(cli, local_cloud, tmp_path):
    workdir = "~/src it's $(touch /mnt/pwned) `touch /mnt/pwned2`; x"
    extra = "setup: pwd > /mnt/setup-pwd\n"
    spec = write_spec(tmp_path, name="tilde", command="pwd > /mnt/pwd", extra=extra)
    spec.write_text(spec.read_text().replace("run:\n", "run:\n  workdir: " + json.dumps(workdir) + "\n"))
    result = cli("create", "--wait", "--keep-slice", spec)
    assert result.code == 0, result.err
    node = show(cli, "tilde")["attempts"][0]["slice_name"]
    expected = "/home/tpujob/" + workdir[2:] + "\n"
    assert host_file(local_cloud, node, 0, "/mnt/pwd").read_text() == expected
    assert host_file(local_cloud, node, 0, "/mnt/setup-pwd").read_text() == expected
    assert not host_file(local_cloud, node, 0, "/mnt/pwned").exists()
    assert not host_file(local_cloud, node, 0, "/mnt/pwned2").exists()
    assert cli("delete", "tilde").code == 0


def test_cancel_and_a_kept_slice_leave_no_mount_behind(cli, local_cloud, tmp_path):
    disk = f"scratch-{os.getpid()}-{time.monotonic_ns() % 100000}"
    extra = f"disks:\n  - {{name: {disk}, mode: read-write, mount: /mnt/scratch}}\n"
    spec = write_spec(tmp_path, name="mounts", command="sleep 600", queued="false", extra=extra)
    assert cli("create", spec).code == 0
    mounted = ["exec", "mounts", "--", "mountpoint", "-q", "/mnt/scratch"]
    assert cli(*mounted).code == 0
    assert cli("cancel", "mounts").code == 0
    assert cli(*mounted).code == 32          # not a mountpoint: the slice is kept, the mount is not
    assert cli("resume", "mounts").code == 0
    assert cli(*mounted).code == 0           # mounted again by the new attempt's setup
    assert cli("delete", "mounts").code == 0
    # A job that ends on a slice it keeps leaves its mounts behind neither.
    extra = extra.replace(disk, disk + "-k")
    spec = write_spec(tmp_path, name="kept", command="true", queued="false", extra=extra)
    assert cli("create", "--wait", "--keep-slice", spec).code == 0
    assert cli("exec", "kept", "--", "mountpoint", "-q", "/mnt/scratch").code == 32
    assert cli("delete", "kept").code == 0
