"""One parsed source file and the findings made on it."""

from __future__ import annotations

import ast
import bisect
from collections.abc import Collection

from tpujob.lint.names import Names
from tpujob.lint.rules import Finding, finding


class Module:
    def __init__(self, tree: ast.Module, path: str, rules: Collection[str], mxu: int,
                 xla: bool | None = None):
        self.tree = tree
        self.path = path
        self.rules = rules  # the rule ids checked in this file
        self.mxu = mxu  # MXU width of the target generation (128, or 256 on v6e)
        self.nodes: list[ast.AST] = []
        self.scope_of: dict[ast.AST, ast.AST] = {}  # node -> innermost function (or module)
        self._by_type: dict[type, list[ast.AST]] = {}
        self._index(tree)
        self.names = Names(tree, self.of_type(ast.Import, ast.ImportFrom))
        # torch_xla code: decided for the whole linted set when given (a model file rarely
        # imports torch_xla itself; the train script next to it does), else by this file.
        self.xla = self.names.imports("torch_xla") if xla is None else xla
        self.findings: list[Finding] = []
        self._spans: list[tuple[int, int, str, bool]] | None = None

    def _index(self, tree: ast.Module) -> None:
        """One traversal records every node, its type and its enclosing function."""
        todo: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        nodes, scope_of, by_type = self.nodes, self.scope_of, self._by_type
        while todo:
            node, scope = todo.pop()
            nodes.append(node)
            scope_of[node] = scope
            by_type.setdefault(type(node), []).append(node)
            inner = node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            for field in node._fields:
                value = getattr(node, field, None)
                if isinstance(value, list):
                    todo.extend((v, inner) for v in value if isinstance(v, ast.AST))
                elif isinstance(value, ast.AST):
                    todo.append((value, inner))

    def of_type(self, *types: type) -> list:
        """Every node of these exact types, in walk order (walking once per file, not per rule)."""
        if len(types) == 1:
            return self._by_type.get(types[0], [])
        return [n for t in types for n in self._by_type.get(t, [])]

    def enabled(self, *rule_ids: str) -> bool:
        return any(r in self.rules for r in rule_ids)

    def emit(self, rule_id: str, node: ast.AST, detail: str = "", fix: str = "") -> None:
        if rule_id not in self.rules:
            return
        line = getattr(node, "lineno", 1)
        self.findings.append(finding(rule_id, self.path, line, getattr(node, "col_offset", 0) + 1,
                                     detail=detail, symbol=self.symbol_at(line), fix=fix))

    def symbol_at(self, line: int, classes_only: bool = False) -> str:
        """The innermost class/function around `line`, dotted: "AttnProcessor2_0.__call__"."""
        if self._spans is None:
            self._spans = self._collect_spans()
        best = ""
        # Spans are sorted by start; any candidate starts at or before `line`. Names nest, so
        # the innermost enclosing one is the longest.
        for start, end, name, is_class in self._spans[:bisect.bisect_right(
                self._spans, (line, 1 << 30))]:
            if start <= line <= end and len(name) >= len(best) and (is_class or not classes_only):
                best = name
        return best

    def _collect_spans(self) -> list[tuple[int, int, str, bool]]:
        """(start, end, dotted name, is class) of every definition, sorted by start."""
        defs = sorted(self.of_type(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef),
                      key=lambda d: (d.lineno, -(d.end_lineno or d.lineno)))
        spans: list[tuple[int, int, str, bool]] = []
        stack: list[tuple[int, str]] = []  # (end, name) of the definitions we are inside
        for d in defs:
            end = d.end_lineno or d.lineno
            while stack and stack[-1][0] < d.lineno:
                stack.pop()
            name = f"{stack[-1][1]}.{d.name}" if stack else d.name
            spans.append((d.lineno, end, name, isinstance(d, ast.ClassDef)))
            stack.append((end, name))
        return spans


def source_of(node: ast.AST, limit: int = 60) -> str:
    """Short source text of a node for a message."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
