"""Static checks for XLA/TPU pitfalls in PyTorch and JAX training code (`tpujob lint`).

    findings = lint_paths(["train.py", "model/"], deps=["diffusers"], accelerator="v6e-8")
    print(render_text(findings))
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from tpujob.errors import UsageError
from tpujob.lint.checker import check_source, imports_torch_xla
from tpujob.lint.files import package_dir, python_files
from tpujob.lint.jax_rules import mxu_width
from tpujob.lint.notebooks import Notebook
from tpujob.lint.rules import ERROR, NOTE, RULES, SEVERITIES, WARNING, Finding, Rule, finding

__all__ = ["ERROR", "NOTE", "RULES", "SEVERITIES", "WARNING", "Finding", "LintBlocked", "Rule",
           "at_least", "errors", "lint_paths", "lint_sync_dir", "render_json", "render_text"]

DEPS_RULES = frozenset(r.id for r in RULES.values() if r.deps)
JAX_IMPORT = re.compile(rb"^\s*(import jax\b|from jax\b|import flax\b|from flax\b)", re.M)


def lint_paths(paths: Iterable[str | Path], deps: Iterable[str] = (),
               accelerator: str | None = None) -> list[Finding]:
    """Lint files and directories (every rule), then installed packages (rules marked deps).

    Directories are walked for *.py and *.ipynb (the code cells of a notebook are linted as
    one module; findings carry the cell), skipping hidden directories, virtual environments and
    what their top-level .gitignore excludes. `accelerator` ("v6e-8", or the bare generation
    "v6e") sets the MXU width. The paths form one set for "torch_xla code": when any of their
    files imports torch_xla, the torch_xla rules apply to all of them (a single file decides
    by its own imports); each --deps package is a set of its own.
    Raises UsageError for a missing path or package, SpecError for an unknown accelerator.
    """
    mxu = 128
    if accelerator:
        from tpujob.catalogue import generation

        mxu = mxu_width(generation(accelerator).alias)
    # Each group is linted as one set: the paths given, then each --deps package.
    groups: list[tuple[list[Path], frozenset[str]]] = [([], frozenset(RULES))]
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"{raw}: no such file or directory")
        groups[0][0].extend(python_files(path))
    for name in deps:
        groups.append((python_files(package_dir(name)), DEPS_RULES))
    findings: list[Finding] = []
    seen: set[Path] = set()
    for index, (files, rules) in enumerate(groups):
        sources: list[tuple[Path, bytes, Notebook | None]] = []
        for file in files:
            key = file.resolve()
            if key in seen:
                continue
            seen.add(key)
            content = _read(file)
            if file.suffix != ".ipynb":
                sources.append((file, content, None))
                continue
            try:
                book = Notebook(content, str(file))
            except UsageError as exc:
                if "TPU000" in rules:
                    findings.append(finding("TPU000", str(file), 1, 1, detail=str(exc)))
                continue
            sources.append((file, book.source, book))
        # A single file decides for itself; in a set, one unconditional torch_xla import (the
        # train script) makes the model files next to it torch_xla code too.
        xla = None if len(sources) == 1 else any(imports_torch_xla(s) for _, s, _ in sources)
        # A JAX project without torch_xla: its PyTorch files are references, tests and weight
        # converters that run eagerly on the CPU, never under TorchXLA, so the PyTorch rules
        # do not apply. (A --deps package is scanned for SDPA whatever else it holds:
        # diffusers has Flax files.)
        reference = index == 0 and xla is False and any(
            JAX_IMPORT.search(s) for _, s, _ in sources)
        for file, source, notebook in sources:
            found = check_source(source, str(file), rules, mxu, xla, torch_reference=reference)
            findings.extend([notebook.locate(f) for f in found] if notebook else found)
    return findings


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise UsageError(f"{file}: cannot read ({exc.strerror})") from exc


def lint_sync_dir(path: str | Path, accelerator: str | None = None) -> list[Finding]:
    """What `create` runs on a job's local sync directory before anything is spent."""
    return lint_paths([path], accelerator=accelerator)


class LintBlocked(UsageError):
    """`create --strict` refused a job: its sync directory has error-level findings.
    The findings travel with the error so the CLI can print them above its one-line error."""

    def __init__(self, findings: list[Finding], where: str):
        self.findings = findings
        n = len(errors(findings))
        super().__init__(f"--strict: {n} error-level lint finding{'s' * (n != 1)} in {where}; "
                         f"nothing recorded (fix them, silence a line with "
                         f"`# tpujob: ignore[RULE]`, or drop --strict)")


def errors(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that fail the run (exit 1, or block `create --strict`)."""
    return [f for f in findings if f.severity == ERROR]


def at_least(findings: Iterable[Finding], severity: str) -> list[Finding]:
    """The findings of `severity` or above (`--min-severity`)."""
    if severity not in SEVERITIES:
        raise UsageError(f"--min-severity {severity!r}: use one of {', '.join(SEVERITIES)}")
    floor = SEVERITIES.index(severity)
    return [f for f in findings if SEVERITIES.index(f.severity) >= floor]


def _counts(findings: list[Finding]) -> dict[str, int]:
    return {s: sum(f.severity == s for f in findings) for s in (ERROR, WARNING, NOTE)}


def render_text(findings: list[Finding]) -> str:
    """`file:line:col RULE severity: message (fix: ...)` lines (`nb.ipynb#cell3:5:1` in a
    notebook), then a count."""
    lines = [f"{f.path}{'' if f.cell is None else f'#cell{f.cell}'}:{f.line}:{f.col} {f.rule} "
             f"{f.severity}: {f.message} (fix: {f.fix})" for f in findings]
    counts = _counts(findings)
    shown = [s for s in (ERROR, WARNING, NOTE) if s != NOTE or counts[NOTE]]
    lines.append(", ".join(f"{counts[s]} {s}{'s' * (counts[s] != 1)}" for s in shown))
    return "\n".join(lines)


def render_json(findings: list[Finding]) -> str:
    counts = _counts(findings)
    return json.dumps({"findings": [f.to_dict() for f in findings], "errors": counts[ERROR],
                       "warnings": counts[WARNING], "notes": counts[NOTE]}, indent=2)
