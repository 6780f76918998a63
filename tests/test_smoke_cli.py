"""The README's two fresh-machine commands stay true: CI runs exactly the README's test command,
both start with scripts/setup, and the demo command calls a real `tpujob` command. (The demo itself
runs end to end in tests/e2e/test_demo.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def _fresh_machine_commands() -> list[str]:
    """The bash blocks of the README's "On a fresh machine" section, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [block.removesuffix("\n") for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


@pytest.fixture(scope="module")
def commands() -> tuple[str, str]:
    blocks = _fresh_machine_commands()
    assert len(blocks) == 2, blocks
    demo, tests = blocks
    assert "\n" not in demo and "\n" not in tests, "each is one copy-paste line"
    return demo, tests


def test_ci_runs_exactly_the_readme_test_command(commands):
    _, test_command = commands
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    code = [line for line in lines if line.strip() and not line.startswith("#")]
    # Only the preamble, then the README's test command, character for character.
    assert code == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', test_command]
    assert lines[0] == "#!/usr/bin/env bash"


def test_both_commands_start_with_the_setup_script(commands):
    demo, tests = commands
    # scripts/setup installs the runtime extra; --test adds pytest, ruff and mypy
    # (tests/scripts/test_setup_script.py), which check the code before the tests run.
    assert demo.split(" && ")[0] == "scripts/setup"
    assert tests.split(" && ") == ["scripts/setup --test", ".venv/bin/ruff check .", ".venv/bin/mypy",
                                   ".venv/bin/pytest -q -n auto --dist loadgroup"]
    assert (ROOT / "scripts" / "setup").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "tpujob" in project["scripts"]  # what .venv/bin/tpujob is


def test_the_demo_command_names_an_existing_cli_command(commands, cli):
    demo, _ = commands
    words = shlex.split(demo.rsplit("&&", 1)[1])
    assert words[0] == ".venv/bin/tpujob", words
    # The same arguments with --help: an unknown command exits 2, a real one prints its help.
    result = cli(*words[1:], "--help")
    assert result.code == 0, result.err
    assert "Usage:" in result.out and words[1] in result.out


def test_every_file_the_readme_links_to_exists():
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#:]+)\)", readme)) | set(re.findall(r"\b(docs/[\w.-]+\.md)\b", readme))
    assert "docs/spec.md" in linked and "docs/benchmarks.md" in linked
    assert sorted(p for p in linked if not (ROOT / p).exists()) == []
