"""Host syncs inside a training step loop (TPU006), for PyTorch/XLA and JAX alike.

Both frameworks dispatch device work asynchronously: the Python loop runs ahead and queues
the next step while the accelerator computes this one. Anything that needs a device value
on the host (`.item()`, `float(loss)`, `np.asarray(x)`, `jax.device_get`, `print(loss)`,
`block_until_ready`, a Python `if` on a tensor) makes the host wait for the step to finish,
so the next step is dispatched late, every iteration.

What a loop body does is followed into the functions of the same module it calls (a
`get_grad_norm(model.parameters())` that calls `.item()` per parameter counts at its
`.item()`), and the framework says which names hold device values (`device`) and which
calls are the training step (`is_step`).

A sync is accepted under a periodic guard, an `if` whose test changes from one iteration to
the next: a `%`, a comparison with the step counter or with a name the loop assigns, a flag
the loop computes (`if should_log:`). These are not guards: a test of loop-invariant
configuration (`if args.log_tokens:`, `if jax.process_index() == 0:`, evaluated the same way
every step), a structural test (`is None`, `in`, `isinstance`), and a branch that holds the
training step itself (`if (i + 1) % accum == 0: optimizer.step()` is the step, not logging).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from tpujob.lint.module import Module
from tpujob.lint.names import call_name

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
STRUCTURAL_OPS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
STRUCTURAL_CALLS = {"isinstance", "hasattr", "callable", "type", "len", "getattr"}
MAX_CALL_DEPTH = 3  # callee chains followed from a loop body


def assigned(nodes: Iterable[ast.AST]) -> set[str]:
    """Names and dotted attribute chains (`self.control`) bound by these nodes."""
    found: set[str] = set()
    for node in nodes:
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        for target in targets:
            found.update(bound_names(target, dotted=True))
    return found


def bound_names(target: ast.AST, dotted: bool = False) -> set[str]:
    """What an assignment target binds: `a`, each name of `a, (b, *c)`; with `dotted`, also
    `self.state` for `self.state = ...` (never `self` itself, which is only read)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {n for e in target.elts for n in bound_names(e, dotted)}
    if isinstance(target, ast.Starred):
        return bound_names(target.value, dotted)
    if dotted and isinstance(target, ast.Attribute):
        name = dotted_name(target)
        return {name} if name else set()
    return set()


def dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def reads(expr: ast.AST, names: set[str]) -> bool:
    """Whether `expr` reads one of `names` (a name, or an attribute chain with that prefix)."""
    for sub in ast.walk(expr):
        if isinstance(sub, (ast.Name, ast.Attribute)):
            dotted = dotted_name(sub)
            if dotted and (dotted in names or any(dotted.startswith(n + ".") for n in names)):
                return True
    return False


def test_parts(test: ast.expr) -> list[ast.expr]:
    """The conjuncts/disjuncts of a test, without `not`."""
    if isinstance(test, ast.BoolOp):
        return [p for v in test.values for p in test_parts(v)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test_parts(test.operand)
    return [test]


def structural(part: ast.expr) -> bool:
    """A test of a value's presence or structure, not of its contents: `x is None`,
    `"k" in batch`, `isinstance(m, nn.Module)`, and a bare `if state.dynamic_scale:` (the
    Optional idiom; a device array's truth would be ambiguous for any non-scalar)."""
    if isinstance(part, ast.Compare):
        return all(isinstance(op, STRUCTURAL_OPS) for op in part.ops)
    if isinstance(part, ast.Call):
        return call_name(part) in STRUCTURAL_CALLS
    return isinstance(part, (ast.Name, ast.Attribute))


def periodic(test: ast.expr, varying: set[str]) -> bool:
    """Whether an `if` test changes between iterations (a logging guard)."""
    for sub in ast.walk(test):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod):
            return True
    for part in test_parts(test):
        if isinstance(part, ast.Compare):
            if all(isinstance(op, STRUCTURAL_OPS) for op in part.ops):
                continue
            if any(reads(side, varying) for side in [part.left, *part.comparators]):
                return True
        elif isinstance(part, ast.Call):
            if call_name(part) not in STRUCTURAL_CALLS and reads(part, varying):
                return True
        elif isinstance(part, (ast.Name, ast.Attribute)) and reads(part, varying):
            return True
    return False


class SyncScan:
    """Finds the syncs of one loop (and of the same-module functions its body calls)."""

    def __init__(self, mod: Module, *,
                 is_step: Callable[[ast.AST], bool],
                 sync: Callable[[ast.AST, set[str]], str],
                 device: Callable[[list[ast.AST], set[str]], set[str]],
                 skip_loop: Callable[[ast.AST], bool],
                 truth: Callable[[ast.expr, set[str]], str]):
        self.mod = mod
        self.is_step = is_step  # does this subtree run the training step?
        self.sync = sync  # description of the sync this node is, given the device names
        self.device = device  # device names after these statements, from seed names
        self.skip_loop = skip_loop  # a nested loop judged on its own
        self.truth = truth  # description of a test whose truth needs a device value
        self.functions: dict[str, list[ast.AST]] = {}
        for node in mod.of_type(*FUNCTIONS):
            self.functions.setdefault(node.name, []).append(node)

    def callee(self, call: ast.Call) -> ast.AST | None:
        func = call.func
        name = None
        if isinstance(func, ast.Name):
            name = func.id
        elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and func.value.id in ("self", "cls")):
            name = func.attr
        defs = self.functions.get(name or "", [])
        return defs[0] if len(defs) == 1 else None

    def scan_loop(self, loop: ast.AST, seeds: set[str]) -> None:
        body = list(ast.iter_child_nodes(loop))
        varying = assigned(ast.walk(loop))
        device = self.device(body, seeds)
        # A for loop's iterable is evaluated once, before the loop: not a per-step sync. A
        # while loop's test runs every iteration.
        if isinstance(loop, ast.While):
            self._test(loop.test, device, varying, (), loop, todo=None)
        statements = list(getattr(loop, "body", [])) + list(getattr(loop, "orelse", []))
        self._scan(statements, device, varying, (), where=loop)

    def _test(self, test: ast.expr, device: set[str], varying: set[str],
              stack: tuple[ast.AST, ...], where: ast.AST, todo: list[ast.AST] | None) -> None:
        """A test evaluated every time it is reached: a sync when its truth is a device
        value's (`if torch.isnan(loss):`); else its parts are scanned like any expression."""
        what = self.truth(test, device)
        if what:
            self._emit(test, what, stack, where)
        elif todo is not None:
            todo.append(test)
        else:
            self._scan([test], device, varying, stack, where)

    def _emit(self, node: ast.AST, what: str, stack: tuple[ast.AST, ...], where: ast.AST) -> None:
        # Named by function, not line: in a notebook the loop's line is in another cell.
        symbol = self.mod.symbol_at(getattr(where, "lineno", 0))
        loop = f"the loop in {symbol}()" if symbol else "a top-level loop"
        via = f" (called every step from {loop})" if stack else ""
        self.mod.emit("TPU006", node, what + via)

    def _scan(self, roots: list[ast.AST], device: set[str], varying: set[str],
              stack: tuple[ast.AST, ...], where: ast.AST) -> None:
        todo: list[ast.AST] = list(reversed(roots))
        while todo:
            node = todo.pop()
            if isinstance(node, DEFS) or (isinstance(node, LOOPS) and self.skip_loop(node)):
                continue
            if isinstance(node, (ast.While, ast.Assert)):
                self._test(node.test, device, varying, stack, where, todo)
                todo.extend(reversed([c for c in ast.iter_child_nodes(node) if c is not node.test]))
                continue
            if isinstance(node, (ast.If, ast.IfExp)):
                self._test(node.test, device, varying, stack, where, todo)
                guarded = periodic(node.test, varying)
                for branch in (node.body, node.orelse):
                    branch_nodes = branch if isinstance(branch, list) else [branch]
                    if guarded and not any(self.is_step(b) for b in branch_nodes):
                        continue
                    todo.extend(reversed(branch_nodes))
                continue
            what = self.sync(node, device)
            if what:
                self._emit(node, what, stack, where)
                continue  # one finding per expression: print(loss.item()) is one sync
            if isinstance(node, ast.Call) and len(stack) < MAX_CALL_DEPTH:
                target = self.callee(node)
                if target is not None and target not in stack:
                    self._scan_callee(target, node, device, stack, where)
            todo.extend(reversed(list(ast.iter_child_nodes(node))))

    def _scan_callee(self, func: ast.AST, call: ast.Call, device: set[str],
                     stack: tuple[ast.AST, ...], where: ast.AST) -> None:
        args = func.args  # type: ignore[attr-defined]
        params = [a.arg for a in args.posonlyargs + args.args]
        if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            params = params[1:]
        seeds = {p for p, a in zip(params, call.args) if reads(a, device)}
        by_name = {k.arg: k.value for k in call.keywords if k.arg}
        seeds |= {p for p in params + [a.arg for a in args.kwonlyargs]
                  if p in by_name and reads(by_name[p], device)}
        body = list(func.body)  # type: ignore[attr-defined]
        # Inside a callee every name it binds, and its parameters, vary between calls.
        varying = assigned(n for s in body for n in ast.walk(s)) | set(params)
        inner = self.device(body, seeds)
        self._scan(body, inner, varying, stack + (func,), where)


def flow(statements: list[ast.AST], seeds: set[str],
         carries: Callable[[ast.AST, set[str]], bool]) -> set[str]:
    """Names bound from device values: seeds, and what assignments derive from them (two
    passes, so `loss = metrics["loss"]` after `state, metrics = step(...)` counts)."""
    names = set(seeds)
    nodes = [n for s in statements for n in _walk_no_defs(s)]
    for _ in range(2):
        for node in nodes:
            value = getattr(node, "value", None)
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) \
                    and value is not None and carries(value, names):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names |= bound_names(target)
    return names


def _walk_no_defs(node: ast.AST):
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        todo.extend(c for c in ast.iter_child_nodes(current) if not isinstance(c, DEFS))
