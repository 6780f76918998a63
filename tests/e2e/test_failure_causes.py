"""A failed host step says why, end to end: the host's own words reach the event, `show --json`
and the output of the command that drove the job, bounded and with the job's secrets redacted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SETUP_FAILS = """\
name: {name}
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
secrets: [API_TOKEN]
setup: {setup}
run:
  command: "true"
"""

BUCKET_JOB = """\
name: {name}
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
buckets:
  - {{bucket: {bucket}, mount: /mnt/data}}
run:
  command: "sleep 600"
"""


def show(cli, job):
    result = cli("show", "--json", job)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_a_failing_setup_shows_what_it_said_and_never_a_secret(cli, local_cloud, tmp_path, monkeypatch,
                                                                tpujob_home):
    value = f"hunter2-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("API_TOKEN", value)
    setup = (f'echo "using $API_TOKEN" >&2; echo "DB_PASSWORD=pa55word-{os.getpid()}" >&2; echo downloading; '
             'echo boom >&2; exit 3')
    spec = tmp_path / "boom.yaml"
    spec.write_text(SETUP_FAILS.format(name="boom", setup=json.dumps(setup)))
    result = cli("create", "--wait", spec)
    assert result.code == 7, result.err
    data = show(cli, "boom")
    assert (data["state"], data["end_reason"]) == ("FAILED", "setup_failed")
    said = [e["message"] for e in data["events"] if "exit code 3" in e["message"]]
    assert said, data["events"]
    assert said[0].startswith("setup failed: setup on host 0: exit code 3: ")
    # stderr only (not "downloading"), in order, one line; the secret and the password masked
    assert "exit code 3: using *** | DB_PASSWORD=*** | boom | tpujob: the job's setup command exited 3" in said[0]
    assert "boom" in result.err and "exit code 3" in result.err
    text = cli("show", "boom")
    assert "boom | tpujob: the job's setup command exited 3" in text.out
    for seen in (result.out + result.err, text.out, json.dumps(data)):
        assert value not in seen and f"pa55word-{os.getpid()}" not in seen
    # The store (database and its WAL) holds neither; the host's own log keeps what it said.
    assert [p for p in _files_holding(tpujob_home, value) if "logs" not in p.parts] == []


def test_a_bucket_gone_at_mount_time_says_so(cli, local_cloud, tmp_path):
    from tpujob.clients import make_storage
    from tpujob.service.context import Context

    gcs = make_storage(Context.load().settings)
    name = f"vanishing-{os.getpid()}"
    gcs.create_bucket(name)
    spec = tmp_path / "gone.yaml"
    spec.write_text(BUCKET_JOB.format(name="gone", bucket=name))
    assert cli("create", spec).code == 0
    assert show(cli, "gone")["state"] == "RUNNING"
    assert cli("cancel", "gone").code == 0
    gcs.bucket(name).delete(force=True)   # between two attempts: create checked it existed

    result = cli("resume", "--wait", "gone")
    assert result.code == 7, result.err
    data = show(cli, "gone")
    assert (data["state"], data["end_reason"]) == ("FAILED", "setup_failed")
    message = next(e["message"] for e in data["events"] if e["message"].startswith("setup failed: mount"))
    # gcsfuse's own words (as its daemon reports a sub-process's error), then the mount script's
    assert message.startswith("setup failed: mount on host 0: exit code 1: ")
    assert "daemonize.Run: readFromProcess: sub-process: " in message
    assert "storage: bucket doesn't exist" in message
    assert f"tpujob: bucket gs://{name} does not exist" in message
    assert f"tpujob: gcsfuse could not mount gs://{name} at /mnt/data (exit 1)" in message
    assert len(message) < 500
    assert "storage: bucket doesn't exist" in result.err
    assert cli("delete", "gone").code == 0
