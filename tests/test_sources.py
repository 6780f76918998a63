"""Every fact the project rests on cites its original source (Google's page, the client type, the
issue), never a file outside the repository that no reader can open."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Paths outside the repository, spelled in parts so that this file does not name them itself.
UNREADABLE = ("../" + "shared", "shared/" + "facts", "FACTS" + ".md")
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist"}


def _files():
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in names:
            path = Path(top) / name
            if not path.is_symlink():
                yield path.relative_to(ROOT).as_posix(), path


def test_nothing_cites_a_file_outside_the_repository():
    found = []
    for rel, path in _files():
        text = path.read_bytes().decode("utf-8", "replace")
        found += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1)
                  if any(word in line for word in UNREADABLE)]
    assert found == [], "cite the original source (Google's page, the client type, the issue) instead"
