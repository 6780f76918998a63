"""Training loops in PyTorch code: a graph that is never cut (TPU005), host syncs (TPU006).

A training loop is a `for`/`while` whose body calls `.backward()` or an optimizer's `.step()`
(the receiver is named like an optimizer: `optimizer`, `self.optim`, `opt`, `scaler`),
directly or through a function of the same module (`train_step(batch)`, `self.step(...)`)
outside that function's own loops: an epoch loop calling `train(epoch)`, which loops over the
batches, is not one (the batch loop is judged in its own function).
Syncs are looked for in the body minus nested functions and minus the branches of an `if`:
`if step % 100 == 0: print(loss.item())` is the usual, acceptable, logging pattern.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tpujob.lint.module import Module, never_on_xla, source_of
from tpujob.lint.names import call_name, walk_local
from tpujob.lint.syncs import SyncScan, flow, structural, test_parts

XLA_SYNCS = {"torch_xla.core.xla_model.mark_step", "torch_xla.step", "torch_xla.sync",
             "torch_xla.core.xla_model.optimizer_step"}
DEVICE_LOADERS = {"torch_xla.distributed.parallel_loader.MpDeviceLoader",
                  "torch_xla.distributed.parallel_loader.ParallelLoader"}
HOST_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
HOST_SYNC_CALLS = {"print", "float", "int", "bool"}
TRAINING_CALLS = {"backward", "step", "optimizer_step"}
OPTIMIZER_NAMES = {"opt", "scaler", "grad_scaler"}
# Tensor predicates whose truth Python reads: torch.isnan(loss) in an `if` is an .item().
TRUTH_CALLS = {"isnan", "isinf", "isfinite", "any", "all", "equal", "allclose", "is_nonzero",
               "gt", "lt", "ge", "le", "eq", "ne"}
LOOPS = (ast.For, ast.AsyncFor, ast.While)
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class Flags:
    backward: bool = False
    step: bool = False
    sync: bool = False

    def merge(self, other: Flags) -> None:
        self.backward |= other.backward
        self.step |= other.step
        self.sync |= other.sync


class _Loops:
    def __init__(self, mod: Module, xla: bool):
        self.mod = mod
        self.xla = xla
        self.functions = {n.name: n for n in mod.of_type(ast.FunctionDef, ast.AsyncFunctionDef)}
        self.summaries: dict[tuple[str, bool], Flags] = {}
        self.loaders = self._device_loader_names()

    def _device_loader_names(self) -> set[str]:
        """Names bound to an MpDeviceLoader/ParallelLoader: iterating one cuts the graph."""
        found: set[str] = set()
        if not (self.mod.names.imports("torch_xla.distributed.parallel_loader") or any(
                n.attr == "per_device_loader" for n in self.mod.of_type(ast.Attribute))):
            return found
        for node in self.mod.of_type(ast.Assign):
            if self._makes_loader(node.value):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.add(target.id)
                    elif isinstance(target, ast.Attribute):
                        found.add(target.attr)
        return found

    def _makes_loader(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and (self.mod.names.resolve(n.func) in DEVICE_LOADERS
                                                or call_name(n) == "per_device_loader")
                   for n in ast.walk(node))

    def flags_of(self, nodes, stack: tuple[str, ...] = (), direct: bool = False) -> Flags:
        """What these nodes do, with the functions of this module they call (`direct`: each
        callee outside its own loops)."""
        flags = Flags()
        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            qual = self.mod.names.resolve(node.func)
            name = call_name(node)
            if qual in XLA_SYNCS:
                flags.sync = True
                flags.step |= name == "optimizer_step"
            elif name == "backward" and isinstance(node.func, ast.Attribute):
                flags.backward = True
            elif name == "step" and _is_optimizer(node.func):
                flags.step = True
            callee = self._local_callee(node)
            if callee and callee not in stack:
                flags.merge(self.summary(callee, stack, direct))
        return flags

    def _local_callee(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Name) and func.id in self.functions:
            return func.id
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "self" and func.attr in self.functions):
            return func.attr
        return None

    def summary(self, name: str, stack: tuple[str, ...] = (), direct: bool = False) -> Flags:
        if (name, direct) not in self.summaries:
            function = self.functions[name]
            nodes = _walk_direct(function) if direct else walk_local(function)
            self.summaries[(name, direct)] = self.flags_of(nodes, stack + (name,), direct)
        return self.summaries[(name, direct)]

    def iterates_loader(self, loop: ast.AST, params: set[str]) -> bool:
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            return False
        if self._makes_loader(loop.iter):
            return True
        used = {n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)} - {"self", "cls"}
        used |= {n.attr for n in ast.walk(loop.iter) if isinstance(n, ast.Attribute)}
        # A loader handed in as a parameter is, in a module that builds device loaders, one.
        return bool(used & self.loaders or (self.loaders and used & params))

    def is_training(self, loop: ast.AST) -> bool:
        """A loop whose every iteration is a training step: the backward or the optimizer step
        in its own body, or in a function it calls outside that function's own loops (an
        epoch loop calling `train(epoch)`, which loops over the batches, is not one: a sync
        there happens once an epoch)."""
        direct = self.flags_of(_walk_direct(loop), direct=True)
        return direct.backward or direct.step

    def check_scope(self, scope: ast.AST) -> None:
        params = set()
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # A method's `self` is not a loader handed in: `for b in self.loader` is judged
            # by the attribute's own binding.
            params = {a.arg for a in scope.args.posonlyargs + scope.args.args
                      + scope.args.kwonlyargs} - {"self", "cls"}
        loops = [n for n in self.mod.of_type(*LOOPS) if self.mod.scope_of[n] is scope]
        # Callees count outside their own loops: an epoch loop calling `train_loop_fn(loader)`
        # does not grow the graph itself; the batch loop in train_loop_fn is judged where it is.
        flags = {id(loop): self.flags_of(walk_local(loop), direct=True) for loop in loops}
        for loop in loops:
            if self.iterates_loader(loop, params):
                flags[id(loop)].sync = True
        for loop in loops:
            f = flags[id(loop)]
            if self.xla and f.backward and f.step and not f.sync and not any(
                    flags[id(inner)].backward and flags[id(inner)].step
                    for inner in walk_local(loop) if inner is not loop and isinstance(inner, LOOPS)):
                self.mod.emit("TPU005", loop, "no xm.mark_step() in this loop")
            if self.is_training(loop):
                self._host_syncs(loop)

    def _host_syncs(self, loop: ast.AST) -> None:
        SyncScan(self.mod, is_step=self._runs_step, sync=_host_sync, device=_device_names,
                 skip_loop=self.is_training, truth=self._tensor_truth).scan_loop(loop, set())

    def _runs_step(self, node: ast.AST) -> bool:
        flags = self.flags_of(walk_local(node))
        return flags.backward or flags.step

    def _tensor_truth(self, test: ast.expr, tensors: set[str]) -> str:
        """`if torch.isnan(loss):`, `if loss > 10:`, `while not done.all():`: Python reads the
        tensor's truth, an implicit `.item()`. In `if not is_torch_xla_available() and
        torch.isnan(loss):` the tensor is never read on XLA: `and` stops at the first part."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) \
            else [test]
        for index, value in enumerate(parts):
            if never_on_xla(value):
                parts = parts[:index]
                break
        for part in (p for value in parts for p in test_parts(value)):
            if structural(part):
                continue
            if isinstance(part, ast.Call):
                qual = self.mod.names.resolve(part.func) or ""
                name = call_name(part)
                if name in TRUTH_CALLS and (qual.startswith("torch.") or (
                        isinstance(part.func, ast.Attribute)
                        and _uses_on_device(part.func.value, tensors))):
                    return f"Python `if` on {source_of(part)}"
                continue
            if _uses_on_device(part, tensors):
                return f"Python `if` on tensor {source_of(part)}"
        return ""


def _is_optimizer(func: ast.expr) -> bool:
    """`optimizer.step()`, `self.opt.step()`, `scaler.step(opt)`; not a sampler's or a
    tokenizer stream's `.step()`, which do not make a training loop."""
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    name = name.lower()
    return "optim" in name or name in OPTIMIZER_NAMES


def _walk_direct(loop: ast.AST):
    """The loop's body without nested loops and nested definitions."""
    todo = list(ast.iter_child_nodes(loop))
    while todo:
        node = todo.pop()
        if isinstance(node, DEFS + LOOPS):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _device_names(statements: list[ast.AST], seeds: set[str]) -> set[str]:
    """Names that hold tensors: what `.backward()` is called on, and what is computed from it
    on the device. `lossf = loss.item()` (or `float(loss)`, `loss.tolist()`,
    `loss.cpu().numpy()`) is a host value: the sync is the conversion's, reported there once,
    and printing `lossf` afterwards syncs nothing."""
    nodes = [n for s in statements for n in walk_local(s)]
    names = set(seeds)
    for n in nodes:
        if isinstance(n, ast.Call) and call_name(n) == "backward" \
                and isinstance(n.func, ast.Attribute):
            # loss.backward(); accelerator.backward(loss) and Lightning's
            # manual_backward(loss) take the loss as their argument: the engine is no tensor.
            tensor = n.args[0] if n.args else n.func.value
            if isinstance(tensor, ast.Name):
                names.add(tensor.id)
    return flow(statements, names, _uses_on_device)


def _is_conversion(call: ast.Call) -> bool:
    """A call whose result is on the host: `.item()`, `.tolist()`, `.numpy()`, `.cpu()`, or
    `float(...)`, `int(...)`, `bool(...)`."""
    name = call_name(call)
    if isinstance(call.func, ast.Attribute):
        return name in HOST_SYNC_METHODS and not call.args
    return isinstance(call.func, ast.Name) and name in HOST_SYNC_CALLS - {"print"}


def _uses_on_device(expr: ast.AST, tensors: set[str]) -> bool:
    """Whether `expr` reads a tensor name other than through a host conversion."""
    return next(_device_reads([expr], tensors), None) is not None


def _host_sync(call: ast.AST, tensors: set[str]) -> str:
    if isinstance(call, ast.JoinedStr):
        for sub in _device_reads([v for v in call.values if isinstance(v, ast.FormattedValue)],
                                 tensors):
            return f"f-string formats tensor {sub.id!r}"
        return ""
    if not isinstance(call, ast.Call):
        return ""
    name = call_name(call)
    if isinstance(call.func, ast.Attribute) and name in HOST_SYNC_METHODS and not call.args:
        return f"{source_of(call)}"
    if isinstance(call.func, ast.Name) and name in HOST_SYNC_CALLS:
        for sub in _device_reads([*call.args, *(k.value for k in call.keywords)], tensors):
            return f"{name}() of tensor {sub.id!r}"
    return ""


def _device_reads(roots: list[ast.AST], tensors: set[str]):
    """The tensor names these expressions read other than through a host conversion."""
    todo = list(roots)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Call) and _is_conversion(node):
            continue
        if isinstance(node, ast.Name) and node.id in tensors:
            yield node
        todo.extend(ast.iter_child_nodes(node))


def check_loops(mod: Module, xla: bool) -> None:
    # Without a backward or optimizer step anywhere there is no training loop to look at.
    if not any(call_name(n) in TRAINING_CALLS and (call_name(n) != "step" or _is_optimizer(n.func))
               for n in mod.of_type(ast.Call)):
        return
    loops = _Loops(mod, xla)
    for scope in [mod.tree] + mod.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
        loops.check_scope(scope)
