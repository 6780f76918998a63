"""The import graph of tpujob/, read with `ast` (nothing is imported): no import circle, and no
module that imports or uses another module's private (`_name`) names.

Circles count module-level imports only, `if TYPE_CHECKING:` blocks included (a circle the type
checker alone follows is still two modules that each need the other). Imports inside functions
are left out: they are deferred on purpose, so that a command imports only what it uses
(docs/architecture.md: `tpujob list` loads no ORM, cloud client or SSH) and google-cloud's
seconds of imports are paid by the commands that call Google; they run after every module is
loaded, so they cannot make a circle at import time.

A private name is another module's when that module defines it (a function, class, module
variable, method or `self._x` attribute) and the module using it does not: `_PinFirstKey`
reaching into `HostGroup._lock` in the same file is one module's own business."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tpujob"
# Parts of tpujob/ not read; a line here ("tpujob/emulator/") leaves a package out of both checks.
NOT_READ: tuple[str, ...] = ()
# Private names of other libraries' objects that a name alone cannot tell from tpujob's own:
# (module, name).
OTHER_LIBRARIES = {
    ("tpujob.cloud.gcs", "_http"),  # google.cloud.storage.Client._http: its authorized session
}
# Private by convention only: the public API of NamedTuple (`_fields`, `_make`, ...) and of ast
# nodes.
PUBLIC_UNDERSCORED = frozenset({"_fields", "_make", "_replace", "_asdict", "_field_defaults"})


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: set[str] = field(default_factory=set)  # module-level, resolved to tpujob modules
    defines: set[str] = field(default_factory=set)  # its own private names


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(prefix) for prefix in NOT_READ):
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(), filename=rel), is_package)
    for module in found.values():
        module.defines = _private_definitions(module.tree)
        module.imports = {target for node in _module_level(module.tree)
                          for target in _targets(node, module, found)}
    return found


def _module_level(tree: ast.Module):
    """The import statements that run when the module is imported: any not inside a function."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _absolute(node: ast.ImportFrom, module: Module) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, module: Module, found: dict[str, Module]) -> list[str]:
    """The tpujob modules an import statement names (`from pkg import mod` names pkg.mod)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in found]
    source = _absolute(node, module)
    targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in found else source for a in node.names]
    return [t for t in targets if t in found]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def _private_definitions(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


def circles(found: dict[str, Module]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (or one importing itself): Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(found[name].imports):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1 or name in found[name].imports:
                out.append(sorted(group))

    for name in sorted(found):
        if name not in index:
            visit(name)
    return out


def private_uses(found: dict[str, Module]) -> set[tuple[str, str, str]]:
    """(module, private name, where) for each import of another module's private name, and each
    use of one (`mod._x`, `obj._x`) that another tpujob module defines and this one does not."""
    everyone: dict[str, set[str]] = {}
    for module in found.values():
        for name in module.defines:
            everyone.setdefault(name, set()).add(module.name)
    uses = set()
    for module in found.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(node, module)
                if source.split(".")[0] != "tpujob":
                    continue
                uses.update((module.name, a.name, f"imported from {source}")
                            for a in node.names if _private(a.name))
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                owners = everyone.get(node.attr, set()) - {module.name}
                if owners and node.attr not in module.defines and (module.name, node.attr) not in OTHER_LIBRARIES:
                    uses.add((module.name, node.attr, f"line {node.lineno}, defined in {', '.join(sorted(owners))}"))
    return uses


def test_the_graph_reads_every_module_and_sees_their_imports():
    found = modules()
    assert "tpujob.store.repository" in found and "tpujob.cli.main" in found
    assert "tpujob.emulator.server" in found
    assert "tpujob.store.transactions" in found["tpujob.store.repository"].imports
    # `from tpujob.reconcile import placement as placing` is the module, not the package.
    assert "tpujob.reconcile.placement" in found["tpujob.reconcile.act"].imports


def test_no_import_circle():
    assert circles(modules()) == []


def test_no_module_reaches_another_modules_private_names():
    assert sorted(private_uses(modules())) == []


def test_the_checks_catch_a_circle_and_a_private_name():
    """The checks themselves, on a made-up pair of modules that does both."""
    a = Module("tpujob.a", Path("a.py"), ast.parse("from tpujob.b import _hidden\n"), False)
    b = Module("tpujob.b", Path("b.py"), ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tpujob.a\n"
        "def _hidden(): ...\n"), False)
    found = {"tpujob.a": a, "tpujob.b": b}
    for module in found.values():
        module.defines = _private_definitions(module.tree)
        module.imports = {t for node in _module_level(module.tree) for t in _targets(node, module, found)}
    assert circles(found) == [["tpujob.a", "tpujob.b"]]
    assert {(m, n) for m, n, _ in private_uses(found)} == {("tpujob.a", "_hidden")}
