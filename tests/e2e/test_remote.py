"""logs, exec, ssh and show's per-host status against the emulator: real SSH, verified keys."""

from __future__ import annotations

import fcntl
import io
import json
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# Each host says hello on stdout and stderr, then waits for $HOME/stop (dropped from the
# emulator side) and says bye: "bye" in a log proves the log was followed to the end.
SPEC = """\
name: remote
tpu: {accelerator: v4-16, zone: us-central2-b}
run:
  command: |
    echo "out $TPUJOB_HOST_INDEX"; echo "err $TPUJOB_HOST_INDEX" >&2
    while [ ! -f "$HOME/stop" ]; do sleep 0.1; done
    echo bye
"""
NASTY = "it's \"quoted\"; $(touch /mnt/pwned) `touch /mnt/pwned2` & | > < * $HOME"


def host_file(client, node: str, index: int, path: str) -> Path:
    root = Path(next(h["root"] for h in client.hosts(node) if h["index"] == index))
    return root / path.lstrip("/")


@pytest.fixture
def running(cli, local_cloud, tmp_path):
    """A RUNNING job on a 2-host slice: (job id, its node's full name)."""
    spec = tmp_path / "remote.yaml"
    spec.write_text(SPEC)
    result = cli("create", spec)
    assert result.code == 0, result.err
    data = json.loads(cli("show", "--json", "remote").out)
    assert data["state"] == "RUNNING"
    # The node's full name: other tests' jobs in the shared emulator have the same short names
    # (every fresh store numbers its jobs from 1), in projects of their own.
    attempt = data["attempts"][0]
    yield data["id"], f"projects/{data['project']}/locations/{attempt['zone']}/nodes/{attempt['slice_name']}"
    cli("delete", data["id"])


def test_show_reports_each_host_and_list_does_not(cli, local_cloud, running):
    job, node = running
    data = json.loads(cli("show", "--json", job).out)
    ips = [h["externalIp"] for h in local_cloud.hosts(node)]  # where tpujob reaches them
    assert data["hosts"] == [{"index": i, "ip": ips[i], "program": "running", "exit_code": None,
                              "step": None, "error": ""} for i in range(2)]
    text = cli("show", job).out
    assert "hosts:" in text and f"1     {ips[1]}  running" in text
    host_file(local_cloud, node, 1, "/home/tpujob/stop").touch()
    deadline = time.monotonic() + 120  # bounds a hang only
    while json.loads(cli("show", "--json", job).out)["hosts"][1]["program"] != "exited":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert json.loads(cli("show", "--json", job).out)["hosts"][1]["exit_code"] == 0
    assert all("hosts" not in row for row in json.loads(cli("list", "--json").out))


def test_exec_runs_argv_literally_on_every_host_with_prefixes(cli, local_cloud, running):
    job, node = running
    result = cli("exec", job, "--", "printf", "%s\\n", NASTY)
    assert result.code == 0, result.err
    assert sorted(result.out.splitlines()) == [f"[host 0] {NASTY}", f"[host 1] {NASTY}"]
    for index in range(2):
        assert not host_file(local_cloud, node, index, "/mnt/pwned").exists()
        assert not host_file(local_cloud, node, index, "/mnt/pwned2").exists()

    result = cli("exec", job, "--", "sh", "-c", 'echo "to err $1" >&2; echo two; echo lines', "-", "x;y")
    assert result.code == 0
    assert sorted(result.err.splitlines()) == ["[host 0] to err x;y", "[host 1] to err x;y"]
    assert [line for line in result.out.splitlines()
            if line.startswith("[host 1]")] == ["[host 1] two", "[host 1] lines"]


def test_exec_exit_status_is_the_highest_host_code(cli, local_cloud, running):
    job, node = running
    host_file(local_cloud, node, 1, "/mnt/fail").write_text("5")
    result = cli("exec", job, "--", "sh", "-c", "exit $(cat /mnt/fail 2>/dev/null || echo 0)")
    assert result.code == 5
    assert result.err.strip() == "tpujob exec: host 1: exit code 5"
    assert cli("exec", job, "--host", "0", "--", "sh", "-c", "exit $(cat /mnt/fail 2>/dev/null || echo 0)").code == 0
    result = cli("exec", job, "--host", "7", "--", "true")
    assert result.code == 2 and "hosts 0 to 1" in result.error_line


def test_logs_read_and_follow_the_program_log(cli, local_cloud, running):
    job, node = running
    result = cli("logs", job)
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["out 0", "err 0"]  # stdout and stderr of the program
    # Follow host 1: it only ends once the program does, after the stop file appears.
    timer = threading.Timer(1.0, host_file(local_cloud, node, 1, "/home/tpujob/stop").touch)
    timer.start()
    started = time.monotonic()
    result = cli("logs", job, "--host", "1", "-f")
    timer.join()
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["out 1", "err 1", "bye"]
    assert time.monotonic() - started >= 1.0
    assert cli("logs", job, "--attempt", "2").code == 3


def test_logs_fall_back_to_local_logs_once_the_slice_is_gone(cli, local_cloud, running):
    job, _ = running
    assert cli("delete", job).code == 0
    result = cli("logs", job, "--host", "1")
    assert result.code == 0
    assert '"state": "started"' in result.out  # launch.sh's answer, captured locally
    assert result.err.startswith("note: slice tpujob-") and "GONE" in result.err
    result = cli("logs", job, "--host", "1", "-f")
    assert result.code == 0 and "(nothing left to follow)" in result.err
    result = cli("exec", job, "--", "true")
    assert result.code == 4 and "GONE, no host to reach" in result.error_line


def test_ssh_without_a_terminal_runs_stdin_as_a_script(cli, local_cloud, running, monkeypatch):
    job, node = running
    script = b"echo $((6 * 7)) > /mnt/ssh; cat /mnt/ssh; echo oops >&2; exit 4\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(script)))
    result = cli("ssh", job, "--host", "1")
    assert (result.code, result.out, result.err) == (4, "42\n", "oops\n")
    assert host_file(local_cloud, node, 1, "/mnt/ssh").read_text() == "42\n"
    assert not host_file(local_cloud, node, 0, "/mnt/ssh").exists()


def test_ssh_with_a_terminal_is_interactive_with_the_window_size(local_cloud, running):
    job, _ = running
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "ssh", job], stdin=follower,
                            stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    seen, sent = b"", False
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if not select.select([leader], [], [], 0.2)[0]:
                continue
            try:
                seen += os.read(leader, 4096)
            except OSError:   # the terminal closed: tpujob exited
                break
            if not sent and seen.rstrip().endswith((b"#", b"$")):  # the prompt: bash reads now
                os.write(leader, b"stty size; tty; echo $((6 * 7)); exit 3\n")
                sent = True
        assert proc.wait(timeout=10) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "33 101" in text and "/dev/pts/" in text and "\r\n42\r\n" in text


def test_cancel_refuses_when_a_reachable_host_fails_to_stop_the_program(cli, local_cloud, running):
    job, node = running
    pidfile = host_file(local_cloud, node, 1, f"/home/tpujob/.tpujob/jobs/{job}/attempt-1/program.pid")
    good = pidfile.read_text()
    pidfile.write_text("not a pid\n")
    result = cli("cancel", job)
    assert result.code == 5
    assert result.error_line == (f"error: job {job} not cancelled (still RUNNING): stopping the program failed "
                                 f"on 1 of 2 hosts: host 1: exit code 1: tpujob: /home/tpujob/.tpujob/jobs/{job}/"
                                 "attempt-1/program.pid holds no pid")
    data = json.loads(cli("show", "--json", job).out)
    assert data["state"] == "RUNNING" and data["attempts"][0]["ended_at"] is None   # nothing recorded
    pidfile.write_text(good)
    assert cli("cancel", job).code == 0
    assert json.loads(cli("show", "--json", job).out)["state"] == "CANCELLED"


def test_cancel_of_a_job_whose_slice_is_gone_succeeds(cli, local_cloud, running):
    job, node = running
    local_cloud.preempt(node)
    result = cli("cancel", job)
    assert result.code == 0, result.err
    assert json.loads(cli("show", "--json", job).out)["state"] == "CANCELLED"
