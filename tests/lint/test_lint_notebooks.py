"""Notebooks: code cells linted as one module; findings carry the cell and the line in it."""

from __future__ import annotations

import json
from pathlib import Path

from tpujob.lint import lint_paths


def notebook(path: Path, *cells: tuple[str, str]) -> Path:
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True),
         **({"outputs": [], "execution_count": None} if kind == "code" else {})}
        for kind, source in cells]}))
    return path


def test_a_step_jitted_in_one_cell_is_known_in_a_later_loop(tmp_path: Path) -> None:
    path = notebook(
        tmp_path / "train.ipynb",
        ("markdown", "# Training\n"),
        ("code", "!pip install flax\nimport jax\nfrom flax import nnx\n"),
        ("code", "@nnx.jit\ndef train_step(model, batch):\n    return model(batch)\n"),
        ("code", "%%time\nfor batch in batches:\n    loss = train_step(model, batch)\n"
                 "    history.append(loss.item())\n"),
    )
    found = [(f.rule, f.cell, f.line) for f in lint_paths([path])]
    assert found == [("TPU006", 3, 4)]


def test_shell_cells_are_skipped_not_syntax_errors(tmp_path: Path) -> None:
    path = notebook(tmp_path / "setup.ipynb",
                    ("code", "git clone https://example.invalid/repo.git\ncd repo\n"),
                    ("code", "import jax\np = jax.pmap(f)\n"))
    found = [(f.rule, f.cell, f.line, f.severity) for f in lint_paths([path])]
    assert found == [("TPU010", 1, 2, "note")]


def test_directories_include_notebooks_and_the_cli_prints_the_cell(cli, tmp_path: Path) -> None:
    notebook(tmp_path / "nb.ipynb", ("code", "import jax\n\np = jax.pmap(f)\n"))
    result = cli("lint", str(tmp_path))
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].startswith(f"{tmp_path / 'nb.ipynb'}#cell0:3:5 TPU010 note: ")


def test_a_file_that_is_not_a_notebook_is_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text("{not json")
    (tmp_path / "ok.py").write_text("x = 1\n")
    found = lint_paths([tmp_path])
    assert [(Path(f.path).name, f.rule) for f in found] == [("broken.ipynb", "TPU000")]
    assert "not a Jupyter notebook" in found[0].message
