"""Rules for PyTorch code bound for TPUs through torch_xla (TPU001-TPU009).

"torch_xla code" is a set of files linted together (a sync directory, the paths given to
`tpujob lint`) of which one imports torch_xla, or a single file that does: the rules about
CUDA, checkpointing, DDP, mark_step and nn.init only apply there, so ordinary CUDA code is
left alone. SDPA is flagged in any module (it is usually called from a model file that never
imports torch_xla).
"""

from __future__ import annotations

import ast
from functools import partial

from tpujob.lint.module import Module, source_of
from tpujob.lint.names import call_name
from tpujob.lint.torch_loops import check_loops
from tpujob.lint.values import Values

SDPA = {"torch.nn.functional.scaled_dot_product_attention",
        "torch._C._nn.scaled_dot_product_attention"}
TORCH_CHECKPOINT = {"torch.utils.checkpoint.checkpoint",
                    "torch.utils.checkpoint.checkpoint_sequential"}
DDP = {"torch.nn.parallel.DistributedDataParallel",
       "torch.nn.parallel.distributed.DistributedDataParallel"}
# Deterministic initialisers give the right values anywhere, and the fan/gain helpers only
# compute numbers; only random initialisers are suspect.
CONSTANT_INITS = {"zeros_", "ones_", "constant_", "eye_", "dirac_", "calculate_gain",
                  "_calculate_fan_in_and_fan_out", "_calculate_correct_fan"}
DYNAMIC_FUNCS = {"nonzero", "unique", "unique_consecutive", "masked_select", "argwhere"}
MASK_CALLS = {"bool", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and",
              "logical_or", "logical_not", "logical_xor", "eq", "ne", "gt", "lt", "ge", "le"}
VALUE_CALLS = {"item", "sum", "max", "min", "argmax", "argmin", "count_nonzero"}
SPMD_MODULES = ("torch_xla.distributed.spmd", "torch_xla.experimental.xla_sharding")


def check(mod: Module) -> None:
    names = mod.names
    xla = mod.xla
    if not (names.imports("torch_xla") or names.imports("torch")):
        return
    values = Values(mod)
    _references(mod, xla, values)
    if mod.enabled("TPU005", "TPU006"):
        check_loops(mod, xla)
    if mod.enabled("TPU007"):
        _dynamic_shapes(mod, values)
    if mod.enabled("TPU008") and _uses_spmd(mod):
        _index_assignments(mod, values)


def _references(mod: Module, xla: bool, values: Values) -> None:
    resolve = mod.names.resolve
    for node in mod.nodes:
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            qual = resolve(node)
            if qual in SDPA:
                symbol = mod.symbol_at(node.lineno)
                where = f" in {symbol}" if symbol else ""
                mod.emit("TPU002", node, source_of(node) + where, fix=_sdpa_fix(mod, node))
            elif xla and qual in TORCH_CHECKPOINT:
                mod.emit("TPU001", node, source_of(node))
        elif isinstance(node, ast.Call):
            qual = resolve(node.func)
            name = call_name(node)
            if xla:
                _xla_call(mod, node, qual, name, values)
            _dynamic_call(mod, node, qual, name, values)


def _dynamic_call(mod: Module, node: ast.Call, qual: str | None, name: str, values: Values
                  ) -> None:
    """torch.nonzero(x), x.unique(), torch.where(cond): output sizes set by tensor values.

    A method named like a dynamic op counts only as a tensor call (on a tensor, or with
    torch-only keywords): pandas' unique() and numpy's nonzero() are not XLA's. On a host
    tensor (`torch.tensor(ids)`, `out.cpu()`) torch runs the op eagerly on the CPU, where a
    data loader or an eval packer may size things as it likes.
    """
    scope = mod.scope_of[node]
    if qual and qual.startswith("torch.") and qual.rsplit(".", 1)[1] in DYNAMIC_FUNCS:
        operand = node.args[0] if node.args else None
        detail = f"{source_of(node.func)}()"
    elif (qual is None and isinstance(node.func, ast.Attribute) and name in DYNAMIC_FUNCS
          and values.is_tensor(node, scope)):
        operand = node.func.value
        detail = f"{source_of(node.func)}()"
    elif qual == "torch.where" and len(node.args) == 1 and not node.keywords:
        operand = node.args[0]
        detail = "torch.where(cond) with one argument"
    else:
        return
    if not values.is_host_tensor(operand, scope):
        mod.emit("TPU007", node, detail)


def _xla_call(mod: Module, node: ast.Call, qual: str | None, name: str, values: Values
              ) -> None:
    scope = mod.scope_of[node]
    if qual in DDP:
        mod.emit("TPU004", node, source_of(node.func))
    elif (qual and qual.startswith("torch.nn.init.")
          and qual.rsplit(".", 1)[1] not in CONSTANT_INITS):
        mod.emit("TPU009", node, source_of(node.func))
    elif name == "cuda" and isinstance(node.func, ast.Attribute):
        mod.emit("TPU003", node, f"{source_of(node.func)}()")
    elif qual == "torch.device" and node.args and values.is_cuda(node.args[0], scope):
        mod.emit("TPU003", node, source_of(node))
    elif name == "to" and node.args and values.is_cuda(node.args[0], scope):
        mod.emit("TPU003", node, source_of(node))
    else:
        device = next((k.value for k in node.keywords if k.arg == "device"), None)
        if device is not None and values.is_cuda(device, scope):
            mod.emit("TPU003", node, f"{source_of(node.func)}(device={source_of(device)})")


def _sdpa_fix(mod: Module, node: ast.expr) -> str:
    """For SDPA inside a class, name the class to patch (e.g. diffusers' AttnProcessor2_0)."""
    cls = mod.symbol_at(node.lineno, classes_only=True).rsplit(".", 1)[-1]
    if not cls:
        return ""
    return (f"patch {cls}: subclass it (or register a replacement processor) with explicit "
            f"attention: softmax(q @ k.transpose(-2, -1) * scale + mask) @ v")


def _dynamic_shapes(mod: Module, values: Values) -> None:
    resolve, scope_of = mod.names.resolve, mod.scope_of
    assigns: dict[ast.AST, list[ast.Assign]] = {}
    for node in mod.of_type(ast.Assign):
        assigns.setdefault(scope_of[node], []).append(node)
    scopes: dict[ast.AST, tuple[set[str], set[str]]] = {}
    for node in mod.of_type(ast.Subscript):
        if not isinstance(node.ctx, ast.Load) or (
                isinstance(node.value, ast.Attribute) and node.value.attr == "at"):
            continue  # JAX's x.at[mask].set(0) keeps x's shape (a file may import both)
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        bounds = [b for p in parts if isinstance(p, ast.Slice) for b in (p.lower, p.upper, p.step)
                  if b is not None and not isinstance(b, ast.Constant)]
        maybe_masks = [p for p in parts if isinstance(p, (ast.Compare, ast.UnaryOp, ast.BinOp,
                                                          ast.Name, ast.Call))]
        if not (bounds or maybe_masks):
            continue
        scope = scope_of[node]
        on_host = partial(values.is_numpy, scope=scope)
        if scope not in scopes:
            scopes[scope] = _scope_names(assigns.get(scope, []), resolve, on_host)
        masks, counts = scopes[scope]
        if values.is_numpy(node.value, scope) or values.is_host_tensor(node.value, scope):
            continue  # an array or CPU tensor on the host (pre-processing): not traced by XLA
        if any(_is_mask(p, masks, resolve) for p in maybe_masks):
            mod.emit("TPU007", node, f"boolean-mask indexing {source_of(node)}")
        elif any(_from_values(b, counts, on_host) for b in bounds):
            mod.emit("TPU007", node, f"slice length from tensor values {source_of(node)}")


def _scope_names(assigns: list[ast.Assign], resolve, on_host) -> tuple[set[str], set[str]]:
    """Names bound in one function to masks (`m = x > 0`) and to tensor-derived ints
    (`n = lengths.max()`; `V = header[3].item()` of a numpy header is a file's constant)."""
    masks: set[str] = set()
    values: set[str] = set()
    facts = []
    for node in assigns:
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if targets:
            refs: set[str] = set()
            from_values = False
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Name):
                    refs.add(sub.id)
                elif _value_call(sub, on_host):
                    from_values = True
            facts.append((node.value, targets, from_values, refs))
    for _ in range(2):  # one round of propagation: m = x > 0; m2 = m & n
        for value, targets, from_values, refs in facts:
            if _is_mask(value, masks, resolve):
                masks.update(targets)
            if from_values or refs & values:
                values.update(targets)
    return masks, values


def _is_mask(node: ast.expr, masks: set[str], resolve) -> bool:
    if isinstance(node, ast.Compare):
        return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return _is_mask(node.operand, masks, resolve)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return _is_mask(node.left, masks, resolve) or _is_mask(node.right, masks, resolve)
    if isinstance(node, ast.Name):
        return node.id in masks
    if isinstance(node, ast.Call) and call_name(node) in MASK_CALLS:
        qual = resolve(node.func)
        return qual is None or qual.startswith("torch.")
    return False


def _from_values(node: ast.expr, values: set[str], on_host) -> bool:
    """True when an int comes from tensor contents (`x.sum()`, `n.item()`), not from shapes."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in values:
            return True
        if _value_call(sub, on_host):
            return True
    return False


def _value_call(node: ast.AST, on_host) -> bool:
    """`x.sum()`, `n.item()` on something other than a numpy array: numpy's values are read
    on the host before tracing (llm.c reads its vocab size as `header[3].item()`), so a slice
    they size is as static as a literal."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in VALUE_CALLS and not on_host(node.func.value))


def _uses_spmd(mod: Module) -> bool:
    if any(mod.names.imports(m) for m in SPMD_MODULES):
        return True
    return any(call_name(n) == "mark_sharding"
               and (mod.names.resolve(n.func) or "").startswith("torch_xla")
               for n in mod.of_type(ast.Call))


def _constant_index(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _constant_index(node.operand)
    if isinstance(node, ast.Slice):
        return all(p is None or _constant_index(p) for p in (node.lower, node.upper, node.step))
    if isinstance(node, ast.Tuple):
        return all(_constant_index(e) for e in node.elts)
    return False


def _index_assignments(mod: Module, values: Values) -> None:
    """`a[idx] = v` where `a` holds a tensor: a dict, a list or a plain parameter is left
    alone (their index assignments never reach XLA)."""
    for node in mod.of_type(ast.Assign, ast.AugAssign):
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets for t in (t.elts if isinstance(t, ast.Tuple) else [t])]
        else:
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Subscript) or _constant_index(target.slice):
                continue
            if values.is_tensor(target.value, mod.scope_of[node]):
                mod.emit("TPU008", target, f"{source_of(target)} = ...")
