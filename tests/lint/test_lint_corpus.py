"""Every corpus file's findings are exactly its `# expect: RULE` comments (none in negatives)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpujob.lint import RULES, lint_paths

CORPUS = Path(__file__).parent / "corpus"
FILES = sorted(CORPUS.glob("*.py"))
SETS = sorted(p for p in (CORPUS / "sets").iterdir() if p.is_dir())
EXPECT = re.compile(r"# expect: ([A-Z0-9 ]+)$")


def expected(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = EXPECT.search(line)
        if match:
            found.extend((number, rule) for rule in match.group(1).split())
    return sorted(found)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_file(path: Path) -> None:
    got = sorted((f.line, f.rule) for f in lint_paths([path]))
    assert got == expected(path)


def test_every_rule_has_positives_and_negatives() -> None:
    for rule in RULES:
        stem = rule.lower()
        assert (CORPUS / f"{stem}_pos.py").exists(), rule
        assert any(expected(p) and any(r == rule for _, r in expected(p)) for p in FILES), rule
        if rule != "TPU000":
            negatives = list(CORPUS.glob(f"{stem}_neg*.py"))
            assert negatives, rule
            assert all(expected(p) == [] for p in negatives)


def test_findings_carry_rule_metadata() -> None:
    (finding,) = [f for f in lint_paths([CORPUS / "tpu002_pos.py"]) if f.line == 9]
    assert finding.severity == "error"
    assert finding.col == 16
    assert finding.symbol == "AttnProcessor2_0.__call__"
    assert "AttnProcessor2_0" in finding.fix
    assert finding.message.startswith("F.scaled_dot_product_attention in AttnProcessor2_0")


@pytest.mark.parametrize("root", SETS, ids=[p.name for p in SETS])
def test_corpus_set(root: Path) -> None:
    """A directory is linted as one set: its expectations hold across its files."""
    got = sorted((Path(f.path).name, f.line, f.rule) for f in lint_paths([root]))
    want = sorted((p.name, line, rule) for p in root.glob("*.py") for line, rule in expected(p))
    assert got == want


def test_torch_xla_is_decided_per_set_not_per_file() -> None:
    root = CORPUS / "sets" / "xla_split"
    assert lint_paths([root / "model.py"]) == []  # alone: plain PyTorch, left alone
    both = lint_paths([root / "model.py", root / "train.py"])  # named one by one: still a set
    assert {f.rule for f in both} == {"TPU001", "TPU003", "TPU009", "TPU012"}
