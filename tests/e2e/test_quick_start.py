"""What a newcomer meets first: `show` of a local job never starts the emulator, the runtime's
`--help`, and a missing bucket named with the command that creates it."""

from __future__ import annotations

import json
import subprocess
import sys


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


def test_a_missing_bucket_is_refused_naming_the_command_that_creates_it(cli, spec_file, stored_jobs,
                                                                        local_cloud):
    spec = spec_file("name: nobucket\ntpu: {accelerator: v4-8, zone: us-central2-b}\n"
                     "run_dir: gs://quick-start-no-bucket/runs\nrun: {command: 'true'}\n")
    refused = cli("create", spec)
    assert refused.code == 2
    assert refused.error_line == ("error: bucket quick-start-no-bucket does not exist: create it with "
                                  "`tpujob emulator create-bucket quick-start-no-bucket`")
    assert stored_jobs() == 0
    made = cli("emulator", "create-bucket", "quick-start-no-bucket")
    assert made.code == 0 and made.out == "bucket gs://quick-start-no-bucket created\n"
    again = cli("emulator", "create-bucket", "quick-start-no-bucket")
    assert again.code == 0 and again.out == "bucket gs://quick-start-no-bucket exists already\n"
    assert cli("create", "--dry-run", spec).code == 0
