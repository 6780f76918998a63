"""`tpujob emulator ...` through the real CLI entry point, the emulator as a background process."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

ZONE = "us-central2-b"


def test_without_an_emulator_status_says_so_and_faults_fail_cleanly(cli):
    assert cli("emulator", "status").out.strip() == "emulator: not running"
    assert json.loads(cli("emulator", "status", "--json").out) == {"running": False}
    result = cli("emulator", "preempt", "n1")
    assert result.code == 3 and "emulator is not running" in result.error_line
    assert cli("emulator", "stop").out.strip() == "emulator was not running"


@pytest.mark.slow
def test_background_emulator_serves_tpu_storage_and_faults(cli, tpujob_home, monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tpujob.cloud.base import SlicePhase, SliceRequest
    from tpujob.cloud.tpu_api import GcpCloud
    from tpujob.emulator.client import EmulatorClient
    from tpujob.emulator.machines.reaper import start_time

    assert cli("emulator", "start", "--provisioning-delay", "0").code == 0
    try:
        info = json.loads(cli("emulator", "status", "--json").out)
        assert info["running"] is True and info["project"] == "tpujob-local"
        assert isinstance(info["ssh_port"], int)
        for key in ("tpu_endpoint", "compute_endpoint", "storage_endpoint"):
            assert info[key].startswith("http://127.0.0.1:")
        assert (tpujob_home / "emulator" / "endpoints.json").exists()
        again = cli("emulator", "start", "--json")  # already running: the same process
        assert json.loads(again.out)["pid"] == info["pid"]

        cloud = GcpCloud.for_emulator(info["tpu_endpoint"])
        req = SliceRequest(project=info["project"], zone=ZONE, name="n1", accelerator_type="v4-8",
                           runtime_version="tpu-ubuntu2204-base")
        assert cloud.create_node(req).phase is SlicePhase.READY
        (host,) = EmulatorClient(info["tpu_endpoint"]).hosts("n1")
        assert pathlib.Path(host["root"]).is_dir()  # a real host, with its own filesystem
        assert host["hostKey"].startswith("ssh-ed25519 ")

        assert cli("emulator", "preempt", "n1", "--grace", "1").out.strip() == "node n1 preempted"
        assert cloud.get_slice(info["project"], ZONE, "n1").phase is SlicePhase.PREEMPTED
        # Every host fault names its host one way: `--host K` (dirty-host and freeze as well).
        assert cli("emulator", "kill-host", "n1", "--host", "0").code == 0
        bad = cli("emulator", "kill-host", "n1", "--host", "5")
        assert bad.code == 2 and "has no host 5" in bad.error_line

        assert cli("emulator", "stockout", ZONE, "v4-8").code == 0
        faults = json.loads(cli("emulator", "faults", "--api-error-rate", "0.25", "--json").out)
        assert faults["apiErrorRate"] == 0.25
        assert faults["stockouts"] == [{"zone": ZONE, "acceleratorType": "v4-8"}]
        cli("emulator", "stockout", ZONE, "v4-8", "--clear")
        shown = cli("emulator", "faults").out
        assert "api error rate 0.25" in shown and "stockout" not in shown

        monkeypatch.setenv("STORAGE_EMULATOR_HOST", info["storage_endpoint"])
        gcs = storage.Client(project=info["project"], credentials=AnonymousCredentials())
        bucket = gcs.create_bucket("runs")
        bucket.blob("a/status.json").upload_from_string('{"ok": true}')
        assert gcs.bucket("runs").blob("a/status.json").download_as_bytes() == b'{"ok": true}'
    finally:
        stopped = cli("emulator", "stop")
    assert stopped.out.strip() == "emulator stopped"
    assert json.loads(cli("emulator", "status", "--json").out) == {"running": False}
    assert not (tpujob_home / "emulator" / "endpoints.json").exists()
    assert not pathlib.Path(host["root"]).exists()  # its hosts went with it
    # Its process is gone: not "no process has its pid", which another process may hold by now
    # (a suite forks thousands a minute; seen once), but none has both its pid and start time.
    assert start_time(info["pid"]) != info["started"]
    assert "serving" in (tpujob_home / "emulator" / "emulator.log").read_text()


@pytest.mark.slow
def test_one_emulator_a_directory_however_busy_or_raced(cli, tpujob_home):
    """Four commands that find no emulator start one between them; one frozen past any answer
    (as on two cores under load) still runs, and no command starts a second beside it; a second
    process on the same directory is refused."""
    from tpujob.emulator import process

    tpujob = pathlib.Path(sys.executable).parent / "tpujob"
    starts = [subprocess.Popen([tpujob, "emulator", "start", "--no-hosts", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        answers = [json.loads(p.communicate(timeout=60)[0]) for p in starts]
        pids = {a["pid"] for a in answers}
        assert len(pids) == 1, answers
        (pid,) = pids
        os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
        try:
            assert process.status()["pid"] == pid
            assert json.loads(cli("emulator", "start", "--no-hosts", "--json").out)["pid"] == pid
            assert process.ensure_running()["pid"] == pid
        finally:
            os.kill(pid, signal.SIGCONT)
        second = subprocess.run([sys.executable, "-m", "tpujob.emulator", "--no-hosts", "--state-dir",
                                 str(tpujob_home / "emulator")], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert second.stderr.strip().endswith(f"error: another emulator serves {tpujob_home / 'emulator'} "
                                              "(it holds emulator.lock there)")
        assert json.loads((tpujob_home / "emulator" / "endpoints.json").read_text())["pid"] == pid
    finally:
        assert cli("emulator", "stop").out.strip() == "emulator stopped"
    assert process.status() is None
    started = json.loads(cli("emulator", "start", "--no-hosts", "--json").out)  # its lock went with it
    assert started["pid"] != pid
    assert cli("emulator", "stop").out.strip() == "emulator stopped"


def test_the_serving_lock_waits_out_a_status_probe_but_not_a_server(tmp_path):
    # status() holds emulator.lock shared for an instant to learn whether it is held; an
    # emulator starting in that instant waits it out instead of exiting "another serves".
    import fcntl
    import threading

    from tpujob.emulator import process

    with open(tmp_path / process.SERVING_LOCK, "a+") as probe:
        fcntl.flock(probe, fcntl.LOCK_SH)
        threading.Timer(0.3, fcntl.flock, (probe, fcntl.LOCK_UN)).start()
        held = process.claim(tmp_path)
        assert held is not None
        with held:
            assert process.claim(tmp_path, patience=0.2) is None  # a server holds it for good


def test_an_image_env_without_a_name_is_refused_before_anything_starts(tmp_path, capsys):
    from tpujob.emulator.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--state-dir", str(tmp_path / "state"), "--image-env", "NO_EQUALS_SIGN"])
    assert exit_info.value.code == 2
    assert "--image-env: expected NAME=VALUE, got 'NO_EQUALS_SIGN'" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
