"""The README's demo command works as written (validate + dry-run plan)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_demo_commands(tmp_path):
    env = {"TPUJOB_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["validate", "jobs.example.yaml"], ["create", "--dry-run", "jobs.example.yaml"]):
        out = subprocess.run([sys.executable, "-m", "tpujob.cli.main", *args], cwd=ROOT, env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
    assert "create queued resource" in out.stdout
    assert not (tmp_path / "tpujob.db").exists() or "PENDING" not in out.stdout
