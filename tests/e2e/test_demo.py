"""`tpujob demo`'s refusals and failures. Its success, from nothing to SUCCEEDED on a fresh
emulator, is checked where the README's Quick start runs after it
(tests/e2e/test_readme_quick_start.py), so the demo runs once in the suite."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


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
