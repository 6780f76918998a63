"""`tpujob emulator stop` and `status` know the emulator's process by its pid and its start time:
a pid is reused once its process is gone (Linux's pid_max is 32768 by default), and a stop that
went by the pid alone signalled whatever process had it since (seen in a cold suite run: another
emulator's host, SIGKILLed while it started)."""

from __future__ import annotations

import json
import subprocess

from tpujob.emulator import process
from tpujob.emulator.machines.reaper import start_time


def test_stop_leaves_alone_a_process_that_took_a_gone_emulators_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUJOB_EMULATOR_DIR", str(tmp_path / "emulator"))
    (tmp_path / "emulator").mkdir()
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        # The emulator that wrote this file is gone; its pid now belongs to the bystander.
        (tmp_path / "emulator" / process.ENDPOINTS_FILE).write_text(json.dumps(
            {"tpu_endpoint": "http://127.0.0.1:9", "pid": bystander.pid, "started": "1"}))

        assert process.status() is None
        assert process.stop(grace=0) is False
        assert bystander.poll() is None, "stop signalled a process that is not the emulator"
        assert start_time(bystander.pid) is not None
    finally:
        bystander.kill()
        bystander.wait()
