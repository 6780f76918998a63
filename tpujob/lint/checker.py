"""Check one file: parse, run every rule group, drop what `# tpujob: ignore[RULE]` silences."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from collections.abc import Collection

from tpujob.lint import jax_rules, torch_rules
from tpujob.lint.module import Module
from tpujob.lint.names import Names, unguarded_imports
from tpujob.lint.rules import WARNING, Finding, finding

IGNORE = re.compile(r"#\s*tpujob:\s*ignore\[([A-Za-z0-9_,\s]+)\]")
# Python 3.12 syntax that an older Python running tpujob rejects: `type X = ...` aliases and
# `def f[T]` / `class C[T]` type parameters (PEP 695); f-strings are matched by their error.
NEWER_SYNTAX = re.compile(r"\s*(type\s+\w+\s*[=\[]|(async\s+)?(def|class)\s+\w+\s*\[)")


def check_source(source: bytes, path: str, rules: Collection[str], mxu: int = 128,
                 xla: bool | None = None, torch_reference: bool = False) -> list[Finding]:
    """Findings for one file's source, sorted by position. `xla`: whether the set of files
    this one belongs to is torch_xla code (None: decide by this file's own imports).
    `torch_reference`: the set is a JAX project whose PyTorch code never runs on XLA."""
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences in other people's code are not our findings.
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        if "TPU000" not in rules:
            return []
        line = getattr(exc, "lineno", None) or 1
        col = getattr(exc, "offset", None) or 1
        detail = getattr(exc, "msg", None) or str(exc)
        if _newer_syntax(exc):
            # The job's Python may well be 3.12+: say so, and do not block `create --strict`.
            here = ".".join(map(str, sys.version_info[:2]))
            return [finding("TPU000", path, line, col, severity=WARNING,
                            detail=f"{detail} (Python 3.12 syntax? tpujob runs on {here})",
                            fix="run tpujob on the job's Python (3.12+) to check this file")]
        return [finding("TPU000", path, line, col, detail=detail)]
    mod = Module(tree, path, rules, mxu, xla)
    if not torch_reference:
        torch_rules.check(mod)
    jax_rules.check(mod)
    # The message breaks ties (two widths of one nn.Linear) so runs print the same order.
    found = sorted(set(mod.findings), key=lambda f: (f.line, f.col, f.rule, f.message))
    if found and b"tpujob:" in source:
        ignored = ignored_lines(source)
        found = [f for f in found if f.rule not in ignored.get(f.line, ())]
    return found


def _newer_syntax(exc: SyntaxError | ValueError) -> bool:
    """A parse failure that Python 3.12 would not have: a PEP 695 alias or type parameters,
    or an f-string (PEP 701 lets them nest quotes, hold backslashes and comments)."""
    if sys.version_info >= (3, 12) or not isinstance(exc, SyntaxError):
        return False
    return (exc.msg or "").startswith("f-string") or bool(NEWER_SYNTAX.match(exc.text or ""))


def imports_torch_xla(source: bytes) -> bool:
    """Whether a file imports torch_xla unconditionally: not under a `try:` or an `if`.

    Libraries that merely support TPUs probe for it (`try: import torch_xla`, `if
    is_torch_xla_available(): import torch_xla.core.xla_model as xm`); such a probe says
    the file can run on XLA, not that the files next to it are XLA code (a JAX package with
    one such probe is still JAX). The file itself is judged by Module."""
    if b"torch_xla" not in source:  # most files: no need to parse them twice
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return Names(tree, unguarded_imports(tree)).imports("torch_xla")


def ignored_lines(source: bytes) -> dict[int, set[str]]:
    """Line -> rule ids silenced there by a `# tpujob: ignore[TPU003,TPU006]` comment."""
    ignored: dict[int, set[str]] = {}
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type == tokenize.COMMENT:
                match = IGNORE.search(token.string)
                if match:
                    rules = {r.strip().upper() for r in match.group(1).split(",") if r.strip()}
                    ignored.setdefault(token.start[0], set()).update(rules)
    except (tokenize.TokenError, SyntaxError):
        pass  # the file parsed with ast, so this only trims a malformed tail; keep what we have
    return ignored
