"""What local names hold (lint/values.py): judged once per name, so self-referencing
bindings cannot blow up, and deep chains stop instead of overflowing the stack."""

from __future__ import annotations

import time
from pathlib import Path

from tpujob.lint import lint_paths


def test_self_referencing_bindings_are_judged_once(tmp_path: Path) -> None:
    lines = ["import torch", "", "def f(items):", "    n = 0", "    m = 0"]
    for i in range(40):  # took minutes when every binding was re-walked for every use
        lines += [f"    n = n + m * {i}", "    m = m + n"]
    lines.append("    return n.unique(), m.unique()")
    (tmp_path / "loop.py").write_text("\n".join(lines) + "\n")
    start = time.process_time()
    assert lint_paths([tmp_path / "loop.py"]) == []  # ints, not tensors
    assert time.process_time() - start < 5


def test_long_chains_of_names_stop_without_error(tmp_path: Path) -> None:
    lines = ["import torch", "", "def f():", "    a0 = torch.zeros(3)"]
    lines += [f"    a{i} = a{i - 1} + 1" for i in range(1, 3000)]
    lines.append("    return a2999.unique()")
    (tmp_path / "chain.py").write_text("\n".join(lines) + "\n")
    lint_paths([tmp_path / "chain.py"])  # too deep to follow to torch.zeros: no finding, no crash
    (tmp_path / "short.py").write_text(
        "import torch\nx = torch.zeros(3, device='xla')\ny = x + 1\nz = y.unique()\n")
    assert [f.rule for f in lint_paths([tmp_path / "short.py"])] == ["TPU007"]
