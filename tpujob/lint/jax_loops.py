"""Host syncs in JAX training loops (TPU006).

A JAX step loop is a `for`/`while` (in a function, or at the top of a script or notebook)
whose body calls the training step, directly or through a function of this module it calls
outside that function's own loops. The training step is a call of a compiled function bound
in this module (`train_step = jax.jit(...)`, `@nnx.jit def train_step`) whose name says it
steps and is not evaluation or inference, or of any callable named like a training step
(`p_train_step` handed in as a parameter, `self.train_step`).

Device values are what the step returns (`state, metrics = train_step(state, batch)`) and
what is computed from them without leaving the device (`loss = metrics["loss"]`,
`state = info.state`). A sync is a conversion of one to a host value: `float()`, `int()`,
`bool()`, `str()`, `print()`, an f-string, a numpy function (`np.asarray(loss)`),
`jax.device_get`, `jax.block_until_ready`, or the methods `.item()`, `.tolist()`,
`.block_until_ready()`; or a Python `if`/`while` on one. JAX dispatches asynchronously:
https://docs.jax.dev/en/latest/async_dispatch.html
"""

from __future__ import annotations

import ast

from tpujob.lint.module import Module, source_of
from tpujob.lint.names import call_name, walk_local
from tpujob.lint.syncs import (
    LOOPS,
    STRUCTURAL_CALLS,
    STRUCTURAL_OPS,
    SyncScan,
    bound_names,
    flow,
    structural,
    test_parts,
)

NOT_TRAINING = ("eval", "test", "pred", "valid", "sample", "decode", "generate", "infer",
                "init")
# Builtins that read a device value on the host (any/all call bool() on each element).
CONVERSIONS = {"float", "int", "bool", "complex", "str", "repr", "print", "any", "all"}
SYNC_FUNCTIONS = {"jax.device_get", "jax.block_until_ready"}
SYNC_METHODS = {"item", "tolist", "block_until_ready", "__array__"}
STATIC_ATTRS = {"shape", "ndim", "dtype", "size", "sharding", "aval", "weak_type"}


def check_step_loops(mod: Module, compiled: set[str]) -> None:
    """TPU006 in the module's training loops; `compiled`: the names bound to compiled callables
    (jax_rules.Jits.callables)."""
    loops = _Loops(mod, compiled)
    scan = SyncScan(mod, is_step=loops.runs_step, sync=loops.sync, device=loops.device,
                    skip_loop=loops.is_step_loop, truth=loops.truth)
    for loop in mod.of_type(*LOOPS):
        if loops.is_step_loop(loop):
            scan.scan_loop(loop, set())


class _Loops:
    def __init__(self, mod: Module, compiled: set[str]):
        self.mod = mod
        self.compiled = compiled
        self.functions: dict[str, list[ast.AST]] = {}
        for node in mod.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
            self.functions.setdefault(node.name, []).append(node)
        self._memo: dict[int, bool] = {}
        self.rebound: set[str] = set()  # device names rebound by a conversion (x = x.item())

    def is_step_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        name = call_name(node)
        lowered = name.lower()
        if "step" not in lowered or any(word in lowered for word in NOT_TRAINING):
            return False
        return "train" in lowered or name in self.compiled

    def _direct(self, node: ast.AST):
        """The node's subtree without nested loops and definitions."""
        todo = list(ast.iter_child_nodes(node))
        while todo:
            current = todo.pop()
            if isinstance(current, (*LOOPS, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                    ast.ClassDef)):
                continue
            yield current
            todo.extend(ast.iter_child_nodes(current))

    def _steps(self, node: ast.AST, depth: int = 0) -> bool:
        """Whether the node's direct body runs the training step, here or in a callee."""
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False
        found = False
        for sub in self._direct(node):
            if self.is_step_call(sub):
                found = True
                break
            if isinstance(sub, ast.Call) and depth < 3:
                callee = self._callee(sub)
                if callee is not None and self._steps(callee, depth + 1):
                    found = True
                    break
        self._memo[key] = found
        return found

    def _callee(self, call: ast.Call) -> ast.AST | None:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls") else "")
        defs = self.functions.get(name, [])
        return defs[0] if len(defs) == 1 else None

    def is_step_loop(self, loop: ast.AST) -> bool:
        return self._steps(loop)

    def runs_step(self, node: ast.AST) -> bool:
        return any(self.is_step_call(n) for n in walk_local(node))

    def device(self, statements: list[ast.AST], seeds: set[str]) -> set[str]:
        names = set(seeds)
        for statement in statements:
            for node in walk_local(statement):
                if isinstance(node, ast.Assign) and self.is_step_call(node.value):
                    for target in node.targets:
                        names |= bound_names(target)
        names = flow(statements, names, lambda value, known: self._reads(value, known) is not None)
        # `loss = loss.item()` (or float(loss)): from there on a host value. The flow is not
        # ordered, so a name rebound by a conversion counts as a host value throughout.
        for statement in statements:
            for node in walk_local(statement):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                        and self._conversion(node.value):
                    killed = {t.id for t in node.targets if isinstance(t, ast.Name)} & names
                    self.rebound |= killed
                    names -= killed
        return names

    def _reads(self, expr: ast.AST, device: set[str]) -> ast.Name | None:
        """A device name `expr` reads as a value: not its shape, not after a conversion."""
        todo = [expr]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Name):
                if node.id in device:
                    return node
                continue
            if isinstance(node, ast.Attribute) and node.attr in STATIC_ATTRS:
                continue
            if isinstance(node, ast.Call) and (self._conversion(node)
                                               or call_name(node) in STRUCTURAL_CALLS):
                continue
            if isinstance(node, ast.Compare) and all(isinstance(op, STRUCTURAL_OPS)
                                                     for op in node.ops):
                continue
            todo.extend(ast.iter_child_nodes(node))
        return None

    def _conversion(self, call: ast.Call) -> bool:
        qual = self.mod.names.resolve(call.func)
        if qual is not None:
            return qual in SYNC_FUNCTIONS or qual.startswith("numpy.")
        if isinstance(call.func, ast.Name):
            return call.func.id in CONVERSIONS
        return isinstance(call.func, ast.Attribute) and call.func.attr in SYNC_METHODS

    def sync(self, node: ast.AST, device: set[str]) -> str:
        if isinstance(node, ast.JoinedStr):
            values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
            used = next((u for v in values if (u := self._reads(v, device))), None)
            return f"f-string formats device value {used.id!r}" if used else ""
        if not isinstance(node, ast.Call):
            return ""
        qual = self.mod.names.resolve(node.func)
        operands: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
        if qual is not None:
            if not (qual in SYNC_FUNCTIONS or qual.startswith("numpy.")):
                return ""
        elif isinstance(node.func, ast.Name):
            if node.func.id not in CONVERSIONS:
                return ""
        elif isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS:
            operands = [node.func.value]
        else:
            return ""
        # The conversion that rebinds a device name (`loss = loss.item()`) reads it on device.
        known = device | self.rebound
        used = next((u for o in operands if (u := self._reads(o, known))), None)
        return f"{source_of(node)} of device value {used.id!r}" if used else ""

    def truth(self, test: ast.expr, device: set[str]) -> str:
        for part in test_parts(test):
            if structural(part):
                continue
            used = self._reads(part, device)
            if used:
                return f"Python `if` on device value {source_of(part)}"
        return ""
