"""One parsed source file and the findings made on it."""

from __future__ import annotations

import ast
import bisect
from collections.abc import Collection

from tpujob.lint.names import Names, unguarded_imports
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
        # imports torch_xla itself; the train script next to it does), else by this file. A
        # file that probes for torch_xla (`try: import torch_xla`) and also uses torch is
        # XLA-capable PyTorch code itself; a JAX file's probe makes nothing XLA code.
        own = self.names.imports("torch_xla") and (
            Names(tree, unguarded_imports(tree)).imports("torch_xla")
            or (self.names.imports("torch") and not self.names.imports("jax")))
        self.xla = own or bool(xla)
        self.findings: list[Finding] = []
        self._spans: list[tuple[int, int, str, bool]] | None = None
        self._non_xla: list[tuple[int, int]] | None = None

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
        if rule_id in XLA_ONLY_RULES and self.in_non_xla_branch(line):
            return
        self.findings.append(finding(rule_id, self.path, line, getattr(node, "col_offset", 0) + 1,
                                     detail=detail, symbol=self.symbol_at(line), fix=fix))

    def in_non_xla_branch(self, line: int) -> bool:
        """Whether `line` is in a branch that never runs on XLA: under `if
        torch.cuda.is_available():`, `if device == "cuda":`, `if not is_torch_xla_available()`,
        or the `else` of `if is_torch_xla_available():` / `if not torch.cuda...`."""
        if self._non_xla is None:
            self._non_xla = []
            for node in self.of_type(ast.If):
                for branch in _non_xla_branches(node):
                    if branch:
                        self._non_xla.append((branch[0].lineno,
                                              branch[-1].end_lineno or branch[-1].lineno))
        return any(start <= line <= end for start, end in self._non_xla)

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


# PyTorch/XLA rules: a CUDA-only branch of code that also runs on XLA is not XLA code.
XLA_ONLY_RULES = {"TPU001", "TPU003", "TPU004", "TPU005", "TPU006", "TPU007", "TPU008",
                  "TPU009"}


def _mentions(node: ast.AST, *words: str) -> bool:
    """Whether a test names one of `words`: `torch.cuda.is_available()`, `use_cuda`,
    `device.type == "cuda"`, `is_torch_xla_available()`, `args.tpu`."""
    for sub in ast.walk(node):
        text = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(
            sub, ast.Attribute) else sub.value if isinstance(sub, ast.Constant) and isinstance(
            sub.value, str) else ""
        if any(word in text.lower() for word in words):
            return True
    return False


# Words of a test that selects a CUDA-only path: CUDA itself, GPUs, and DeepSpeed, whose
# engine runs on CUDA (and ROCm) devices only.
CUDA_WORDS = ("cuda", "gpu", "deepspeed")
XLA_WORDS = ("xla", "tpu")


def never_on_xla(test: ast.expr) -> bool:
    """A condition that is false on XLA: `torch.cuda.is_available()`, `device == "cuda"`,
    `not is_torch_xla_available()`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _mentions(test.operand, *XLA_WORDS) and not _mentions(test.operand, *CUDA_WORDS)
    return _mentions(test, *CUDA_WORDS) and not _mentions(test, *XLA_WORDS)


def _non_xla_branches(node: ast.If) -> list[list[ast.stmt]]:
    """The branches of an `if` that only run off XLA."""
    test = node.test
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    cuda, xla = _mentions(inner, *CUDA_WORDS), _mentions(inner, *XLA_WORDS)
    if cuda and not xla:
        return [node.orelse] if negated else [node.body]
    if xla and not cuda:
        return [node.body] if negated else [node.orelse]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
            never_on_xla(v) for v in test.values):
        return [node.body]
    return []


def source_of(node: ast.AST, limit: int = 60) -> str:
    """Short source text of a node for a message."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
