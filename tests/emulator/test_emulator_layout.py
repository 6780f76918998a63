"""The emulator's import graph, read from its source with `ast`: the machines wing imports
nothing from the APIs it serves, lazy imports included. That no module imports itself back is
tests/test_import_graph.py's, for the whole package."""

from __future__ import annotations

import ast
import pathlib

import tpujob.emulator

ROOT = pathlib.Path(tpujob.emulator.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ("tpujob", "emulator", *path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                    + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def test_the_machines_import_nothing_from_the_apis():
    reach = {name: deps for name, deps in _imports().items() if name.startswith("tpujob.emulator.machines")}
    assert reach and all(not d.startswith("tpujob.emulator.apis") for deps in reach.values() for d in deps)
