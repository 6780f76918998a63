"""docs/architecture.md is the map a newcomer follows from the README to the code: every module
it names exists (a path from the repository root, from tpujob/, from tests/, or, in the
emulator's rows, from tpujob/emulator/), so a move that forgets the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"`?((?:[\w.-]+/)+[\w-]+\.(?:py|sh|md|yaml))`?")


def test_every_path_the_architecture_names_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    bases = (ROOT, ROOT / "tpujob", ROOT / "tpujob" / "emulator", ROOT / "docs", ROOT / "tests")
    missing = sorted({p for p in NAMED.findall(text) if not any((base / p).exists() for base in bases)})
    assert missing == [], "docs/architecture.md names files the tree does not have"


def test_every_package_of_tpujob_has_a_place_in_the_architecture():
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(p.parent.relative_to(ROOT / "tpujob").as_posix()
                      for p in (ROOT / "tpujob").rglob("__init__.py"))
    assert [p for p in packages if p != "." and f"{p.split('/')[0]}/" not in text] == []
