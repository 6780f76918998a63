"""scripts/bench_lint.py on a machine without the snapshots (CI): a clear message, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "tests" / "lint" / "real" / "corpus.yaml"


def test_missing_snapshots_are_named_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_lint.py"),
                             "--corpus", str(tmp_path)], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 2
    names = [r["name"] for r in yaml.safe_load(MANIFEST.read_text())["repositories"]]
    assert f"{len(names)} of {len(names)} snapshots missing under {tmp_path}" in result.stderr
    assert all(name in result.stderr for name in names)
    assert result.stdout == ""


def test_the_manifest_labels_every_file_with_commit_and_licence() -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    repos = data["repositories"]
    assert len(repos) >= 6
    held = {r["name"] for r in repos if r.get("held_out")}
    assert len(held) >= 2
    for repo in repos:
        assert len(repo["commit"]) == 40 and repo["licence"]
        for entry in repo["files"]:
            for label in entry.get("pitfalls", []):
                assert label["rule"].startswith("TPU") and label["line"] >= 1 and label["why"]
            for label in entry.get("lookalikes", []):
                assert "rule" not in label and label["line"] >= 1 and label["why"]
