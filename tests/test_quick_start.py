"""What a newcomer meets first: `show` of a local job never starts the emulator, the runtime's
`--help`, and a missing bucket named with the command that creates it."""

from __future__ import annotations

import json
import subprocess
import sys

from job_story import story  # noqa: F401 - fixture


def test_show_of_a_running_local_job_starts_no_emulator(cli, story, no_emulator_left):
    from tpujob.emulator import process

    ctx, job, _ = story  # RUNNING on the local cloud, whose emulator is not running
    result = cli("show", str(job.id), "--json")
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert shown["state"] == "RUNNING"
    assert "the local emulator is not running (`tpujob emulator start`)" in shown["hosts_error"]
    assert process.status() is None


def test_runtime_help_prints_its_usage_and_exits_0():
    done = subprocess.run([sys.executable, "-m", "tpujob.runtime", "--help"], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m tpujob.runtime")
    assert "TPUJOB_RUN_DIR" in done.stdout and "CONFIG" in done.stdout
