"""What local names hold (lint/values.py): judged once per name, so self-referencing
bindings cannot blow up, and deep chains stop instead of overflowing the stack."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tpujob.lint import lint_paths


def test_self_referencing_bindings_are_judged_once(tmp_path: Path, monkeypatch) -> None:
    # Counted, not timed: each (question, name, binding) is answered once (it took minutes when
    # every binding was re-walked for every use; scripts/bench_lint.py prints the seconds).
    from tpujob.lint import values

    answered: Counter = Counter()
    judge = values.Values._judge

    def counting(self, question, name, scope, answer):
        def counted(where, bound):
            answered[(question, name, id(where))] += 1
            return answer(where, bound)
        return judge(self, question, name, scope, counted)

    monkeypatch.setattr(values.Values, "_judge", counting)
    lines = ["import torch", "", "def f(items):", "    n = 0", "    m = 0"]
    for i in range(8):  # enough for a walk without the memo to answer some twice, in a blink
        lines += [f"    n = n + m * {i}", "    m = m + n"]
    lines.append("    return n.unique(), m.unique()")
    (tmp_path / "loop.py").write_text("\n".join(lines) + "\n")
    assert lint_paths([tmp_path / "loop.py"]) == []  # ints, not tensors
    assert answered and max(answered.values()) == 1


def test_long_chains_of_names_stop_without_error(tmp_path: Path) -> None:
    lines = ["import torch", "", "def f():", "    a0 = torch.zeros(3)"]
    lines += [f"    a{i} = a{i - 1} + 1" for i in range(1, 3000)]
    lines.append("    return a2999.unique()")
    (tmp_path / "chain.py").write_text("\n".join(lines) + "\n")
    lint_paths([tmp_path / "chain.py"])  # too deep to follow to torch.zeros: no finding, no crash
    (tmp_path / "short.py").write_text(
        "import torch\nx = torch.zeros(3, device='xla')\ny = x + 1\nz = y.unique()\n")
    assert [f.rule for f in lint_paths([tmp_path / "short.py"])] == ["TPU007"]
