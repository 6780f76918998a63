"""Which files are linted: directories, .gitignore, hidden dirs and virtualenvs; the sync dir;
the order findings come out in."""

from __future__ import annotations

import sys
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


def test_python_312_syntax_is_a_warning_on_an_older_python(tmp_path: Path) -> None:
    # AI-Hypercomputer/maxtext kernels/mhc/common.py:58 (a `type` alias) and
    # examples/sft_qwen3_demo_utils.py:135 (an f-string nesting its quotes) are valid Python
    # 3.12; on an older Python they must not block `create --strict` as broken files.
    tree(tmp_path, {
        "alias.py": "import jax\ntype KernelContext = tuple[jax.Array, jax.Array]\n",
        "generic.py": "def first[T](xs: list[T]) -> T:\n    return xs[0]\n",
        "fstring.py": 'batch = {"a": [1]}\nprint(f"Target: {batch["a"][0]}")\n',
    })
    findings = lint_paths([tmp_path])
    if sys.version_info >= (3, 12):
        assert findings == []
    else:
        assert [(Path(f.path).name, f.rule, f.severity) for f in findings] == [
            ("alias.py", "TPU000", "warning"), ("fstring.py", "TPU000", "warning"),
            ("generic.py", "TPU000", "warning")]
        assert "Python 3.12 syntax?" in findings[0].message
