"""Jupyter notebooks (.ipynb) as Python: the code cells, in order, as one module.

The cells of a notebook share one namespace when run top to bottom, so they are linted as
one source: a `train_step` jitted in one cell is known in the loop of a later one. IPython
syntax is not Python: a line magic or shell escape (`%time x = f()`, `!pip install ...`)
becomes `pass` at its indentation, and a cell that still does not parse on its own (a
`%%bash` cell, shell commands in a code cell, another kernel's language) is left out rather
than reported as a syntax error. Findings are mapped back to (cell index, line in cell).

nbformat 4: https://nbformat.readthedocs.io/en/latest/format_description.html (`cells`,
`cell_type` "code", `source` a string or a list of strings).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import replace

from tpujob.errors import UsageError
from tpujob.lint.rules import Finding

MAGIC = re.compile(r"^(\s*)(%|!)")


class Notebook:
    def __init__(self, raw: bytes, path: str):
        try:
            data = json.loads(raw)
            cells = data["cells"]
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: not a Jupyter notebook ({exc})") from exc
        lines: list[str] = []
        self.origin: list[tuple[int, int]] = []  # combined line - 1 -> (cell, line in cell)
        for index, cell in enumerate(cells):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            code = [MAGIC.sub(r"\1pass  # ", line) for line in text.splitlines()]
            if not _parses("\n".join(code)):
                continue
            for number, line in enumerate(code, 1):
                lines.append(line)
                self.origin.append((index, number))
        self.source = ("\n".join(lines) + "\n").encode()

    def locate(self, finding: Finding) -> Finding:
        """The finding at its cell and line within the cell."""
        if not 1 <= finding.line <= len(self.origin):
            return finding
        cell, line = self.origin[finding.line - 1]
        return replace(finding, line=line, cell=cell)


def _parses(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True
