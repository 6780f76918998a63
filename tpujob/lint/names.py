"""What a name in a module refers to: import aliases resolved to qualified names.

`import torch.nn.functional as F` makes `F.scaled_dot_product_attention` resolve to
`torch.nn.functional.scaled_dot_product_attention`; `from torch.nn.functional import
scaled_dot_product_attention as sdpa` makes `sdpa` resolve to the same. Imports anywhere in
the module count (inside functions, under `if`/`try`), because conditional imports are how
libraries and training scripts pull in torch_xla.
"""

from __future__ import annotations

import ast

_FOLDABLE = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
             ast.FloorDiv: int.__floordiv__}


class Names:
    def __init__(self, tree: ast.Module, imports: list[ast.Import | ast.ImportFrom]):
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()  # every module imported, fully qualified
        self.constants: dict[str, ast.expr] = {}  # module-level NAME = expr, for widths
        for node in imports:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.modules.add(alias.name)
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                # Relative imports keep their dots, so they never match an absolute name.
                base = "." * node.level + (node.module or "")
                self.modules.add(base)
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                self.constants[stmt.targets[0].id] = stmt.value

    def imports(self, package: str) -> bool:
        """True when the module imports `package` or anything below it."""
        prefix = package + "."
        return any(m == package or m.startswith(prefix) for m in self.modules)

    def resolve(self, node: ast.AST | None) -> str | None:
        """The qualified name of a Name/Attribute chain rooted in an import, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def int_value(self, node: ast.expr, depth: int = 0) -> int | None:
        """Fold an int literal, a module constant or simple arithmetic on them; else None."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.int_value(self.constants[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and type(node.op) in _FOLDABLE:
            left = self.int_value(node.left, depth + 1)
            right = self.int_value(node.right, depth + 1)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and not right):
                return None
            return _FOLDABLE[type(node.op)](left, right)
        return None


def call_name(call: ast.Call) -> str:
    """The last component of what is called: `opt.step()` -> "step", `print(x)` -> "print"."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def walk_local(node: ast.AST):
    """ast.walk that does not enter nested function, lambda or class bodies."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                      ast.ClassDef)):
                todo.append(child)


def unguarded_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements outside every `try` and `if` (function bodies count: a script's
    `def main(): import torch_xla` is as certain as a top-level one)."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.Try, ast.If, ast.expr)) and \
                type(node).__name__ != "TryStar":
            todo.extend(ast.iter_child_nodes(node))
    return found

