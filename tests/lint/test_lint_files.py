"""Which files are linted: directories, .gitignore, hidden dirs and virtualenvs; the sync dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpujob.errors import UsageError
from tpujob.lint import lint_paths, lint_sync_dir
from tpujob.lint.files import GitIgnore, python_files

BAD = "import torch_xla\nimport torch\ntorch.zeros(1).cuda()\n"


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_sync_dir_honours_gitignore_and_skips_hidden_and_venvs(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        ".gitignore": "# outputs\n/build/\n*_generated.py\nscratch/\n!scratch/keep.py\n",
        "train.py": BAD,
        "pkg/model.py": BAD,
        "pkg/model_generated.py": BAD,
        "build/lib.py": BAD,
        "pkg/build/ok.py": BAD,  # `/build/` is anchored to the root
        "scratch/x.py": BAD,
        ".git/hooks/h.py": BAD,
        "env/pyvenv.cfg": "home = /usr\n",
        "env/lib/site.py": BAD,
        "notes.txt": BAD,
    })
    linted = sorted({Path(f.path).relative_to(root).as_posix() for f in lint_sync_dir(root)})
    assert linted == ["pkg/build/ok.py", "pkg/model.py", "train.py"]


def test_gitignore_negation_last_match_wins() -> None:
    ignore = GitIgnore(["*.py", "!keep.py", "data/"])
    assert ignore.ignored("a/b.py", is_dir=False)
    assert not ignore.ignored("a/keep.py", is_dir=False)
    assert ignore.ignored("x/data", is_dir=True)
    assert not ignore.ignored("x/data", is_dir=False)


def test_file_named_explicitly_is_linted_even_if_ignored(tmp_path: Path) -> None:
    tree(tmp_path, {".gitignore": "*.py\n", "train.py": BAD})
    assert python_files(tmp_path) == []
    assert [f.rule for f in lint_paths([tmp_path / "train.py"])] == ["TPU003"]


def test_same_file_twice_is_reported_once(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": BAD})
    assert len(lint_paths([tmp_path, tmp_path / "train.py"])) == 1


def test_missing_sync_dir_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or directory"):
        lint_sync_dir(tmp_path / "missing")


def test_unparsable_file_is_an_error_finding(tmp_path: Path) -> None:
    tree(tmp_path, {"py2.py": "print 'hello'\n", "latin.py": "# coding: latin-1\nx = '\xe9'\n"})
    findings = lint_paths([tmp_path])
    assert [(Path(f.path).name, f.rule, f.line) for f in findings] == [("py2.py", "TPU000", 1)]
