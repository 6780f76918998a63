"""`tpujob demo`: what a newcomer runs first, on a fresh emulator, from nothing to SUCCEEDED."""

from __future__ import annotations

import json

import pytest

from tpujob.service.demo import example_spec

pytestmark = pytest.mark.slow


def test_demo_starts_the_emulator_and_runs_the_example_to_success(cli, tmp_path, monkeypatch):
    from tpujob.emulator import process

    monkeypatch.setenv("TPUJOB_EMULATOR_DIR", str(tmp_path / "fresh-emulator"))
    assert process.status() is None
    try:
        result = cli("demo")
        assert process.status() is not None
    finally:
        process.stop(grace=5)
    assert result.code == 0, result.err
    assert result.err.startswith("emulator started (http://127.0.0.1:")
    assert f"recorded from {example_spec()}" in result.err
    assert "program launched on 2 hosts" in result.err  # progress while following
    listing, shown = result.out.split("$ tpujob show 000001")
    assert "$ tpujob list --all" in listing and "SUCCEEDED" in listing
    assert "state:        SUCCEEDED" in shown and "attempts:" in shown
    # With the emulator stopped, `show` still answers from the store, says why the run dir is
    # not readable, and starts nothing.
    shown = cli("show", "--json", "demo")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert (data["state"], data["accelerator"]) == ("SUCCEEDED", "v4-16")
    assert data["run_dir"] is None and "emulator is not running" in data["run_dir_error"]
    assert process.status() is None
    # Restarted (on new ports), the emulator's storage still holds the run dir: the final verdict.
    process.start()
    try:
        data = json.loads(cli("show", "--json", "demo").out)
    finally:
        process.stop(grace=5)
    assert (data["run_dir"]["state"], data["run_dir"]["step"]) == ("succeeded", 30), data.get("run_dir_error")


def test_demo_with_a_failing_spec_exits_7(cli, local_cloud, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun: {command: 'exit 2'}\n")
    result = cli("demo", "--spec", spec)
    assert result.code == 7
    assert result.err.startswith("emulator already running")
    assert result.err.strip().splitlines()[-1] == "error: job 000001 ended FAILED (user_error)"
    assert "$ tpujob show 000001" in result.out


def test_demo_refuses_a_real_cloud_and_a_missing_spec(cli, stored_jobs, tmp_path, monkeypatch):
    result = cli("demo", "--spec", tmp_path / "nope.yaml")
    assert result.code == 3 and "no job spec at" in result.error_line
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    result = cli("demo")
    assert result.code == 6 and "local emulator" in result.error_line
    assert stored_jobs() == 0
