"""Rules for JAX code (TPU010, TPU011) and layer widths against the MXU (TPU012).

Inside a function traced by `jax.jit` (or `jax.pmap`) the arguments are abstract values:
Python `if`/`while`/`range()` on them, or a slice whose bound comes from them (`x[:x.sum()]`),
raises at trace time. Shapes, dtypes (`x.ndim`, `jnp.ndim(x)`, `jax.typeof(x)`) and arguments
named in static_argnums/static_argnames are concrete and fine.
"""

from __future__ import annotations

import ast

from tpujob.lint.module import Module, source_of
from tpujob.lint.names import call_name

JITS = {"jax.jit", "jax.pmap", "flax.nnx.jit", "flax.linen.jit"}
PARTIALS = {"functools.partial"}
STATIC_ATTRS = {"shape", "ndim", "dtype", "size", "sharding", "aval", "weak_type"}
# Calls that read only an argument's type or structure (`jnp.ndim(x)`, `jax.typeof(x)`): the
# abstract value is concrete while tracing, as `x.ndim` is.
STATIC_CALLS = {"len", "isinstance", "type", "hasattr", "callable", "id", "ndim", "shape",
                "isscalar", "typeof", "result_type"}
CONCRETE_CALLS = {"int", "float", "bool", "range"}
# Layers whose widths reach the MXU: qualified name -> (position, keyword) of each width.
LAYERS: dict[str, tuple[tuple[int, str], ...]] = {
    "flax.linen.Dense": ((0, "features"),),
    "flax.nnx.Linear": ((0, "in_features"), (1, "out_features")),
    "haiku.Linear": ((0, "output_size"),),
    "equinox.nn.Linear": ((0, "in_features"), (1, "out_features")),
    "torch.nn.Linear": ((0, "in_features"), (1, "out_features")),
}
MXU_BY_GENERATION = {"v6e": 256}
MIN_JUDGED_WIDTH = 128  # the MXU tile on every generation


def mxu_width(generation_alias: str | None) -> int:
    return MXU_BY_GENERATION.get(generation_alias or "", 128)


def check(mod: Module) -> None:
    names = mod.names
    jax = names.imports("jax") or names.imports("flax")
    if jax and mod.enabled("TPU010", "TPU011"):
        jitted = _jitted_functions(mod)
        for node in mod.of_type(ast.Name, ast.Attribute):
            if names.resolve(node) == "jax.pmap":
                mod.emit("TPU010", node, source_of(node))
        for func, static in jitted:
            _check_traced(mod, func, static)
    if mod.enabled("TPU012") and (jax or names.imports("haiku") or names.imports("equinox")
                                   or mod.xla):
        _layer_widths(mod)


def _jit_call(mod: Module, node: ast.expr) -> ast.Call | None | bool:
    """For a decorator or wrapper: the jit call carrying the options, True for bare @jax.jit."""
    resolve = mod.names.resolve
    if resolve(node) in JITS:
        return True
    if isinstance(node, ast.Call):
        qual = resolve(node.func)
        if qual in JITS:
            return node
        if qual in PARTIALS and node.args and resolve(node.args[0]) in JITS:
            return node
    return None


def _static_params(func: ast.FunctionDef, options: ast.Call | bool) -> set[str]:
    positional = [a.arg for a in func.args.posonlyargs + func.args.args]
    static: set[str] = set()
    if not isinstance(options, ast.Call):
        return static
    for keyword in options.keywords:
        values = keyword.value.elts if isinstance(keyword.value, (ast.Tuple, ast.List)) \
            else [keyword.value]
        consts = [v.value for v in values if isinstance(v, ast.Constant)]
        if keyword.arg == "static_argnums":
            static.update(positional[i] for i in consts
                          if isinstance(i, int) and -len(positional) <= i < len(positional))
        elif keyword.arg == "static_argnames":
            static.update(c for c in consts if isinstance(c, str))
    return static


def _jitted_functions(mod: Module) -> list[tuple[ast.FunctionDef, set[str]]]:
    defs = {n.name: n for n in mod.of_type(ast.FunctionDef)}
    found: list[tuple[ast.FunctionDef, set[str]]] = []
    for node in mod.of_type(ast.FunctionDef, ast.Call):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                options = _jit_call(mod, decorator)
                if options is not None:
                    found.append((node, _static_params(node, options)))
        elif isinstance(node, ast.Call) and mod.names.resolve(node.func) in JITS and node.args:
            # f = jax.jit(step, static_argnums=...) on a function of this module
            target = node.args[0]
            if isinstance(target, ast.Name) and target.id in defs:
                found.append((defs[target.id], _static_params(defs[target.id], node)))
    return found


def _dynamic_use(node: ast.AST, traced: set[str]) -> str | None:
    """The traced name used for its value in `node` (not its shape or identity), else None."""
    if isinstance(node, ast.Name):
        return node.id if node.id in traced else None
    if isinstance(node, ast.Attribute) and node.attr in STATIC_ATTRS:
        return None
    if isinstance(node, ast.Call) and call_name(node) in STATIC_CALLS:
        return None
    if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                             for op in node.ops):
        # Identity and membership (`"bias" in params`) look at the pytree's structure, which
        # is static under tracing; only comparisons of array values are traced.
        return None
    for child in ast.iter_child_nodes(node):
        used = _dynamic_use(child, traced)
        if used:
            return used
    return None


def _check_traced(mod: Module, func: ast.FunctionDef, static: set[str]) -> None:
    args = func.args
    traced = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} - static - {"self"}
    if args.vararg:
        traced.add(args.vararg.arg)
    body = [n for stmt in func.body for n in ast.walk(stmt)]
    for _ in range(2):  # y = x * 2 makes y traced too; n = x.shape[0] does not
        for node in body:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value \
                    and _dynamic_use(node.value, traced):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    traced.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    for node in body:
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            used = _dynamic_use(node.test, traced)
            if used:
                kind = {ast.If: "if", ast.While: "while", ast.IfExp: "conditional expression",
                        ast.Assert: "assert"}[type(node)]
                mod.emit("TPU011", node, f"Python {kind} on traced {used!r} in jitted "
                                         f"{func.name}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in CONCRETE_CALLS:
            used = next((u for a in node.args if (u := _dynamic_use(a, traced))), None)
            if used:
                mod.emit("TPU011", node, f"{node.func.id}() of traced {used!r} in jitted "
                                         f"{func.name}()")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            index = node.slice
            parts = index.elts if isinstance(index, ast.Tuple) else [index]
            for part in parts:
                bounds = [part.lower, part.upper, part.step] if isinstance(part, ast.Slice) \
                    else [part] if isinstance(part, ast.Compare) else []
                used = next((u for b in bounds if b is not None
                             and (u := _dynamic_use(b, traced))), None)
                if used:
                    mod.emit("TPU011", node, f"slice {source_of(node)} depends on traced "
                                             f"{used!r} in jitted {func.name}()")
                    break


def _layer_widths(mod: Module) -> None:
    mxu = mod.mxu
    for node in mod.of_type(ast.Call):
        qual = mod.names.resolve(node.func)
        spec = LAYERS.get(qual or "")
        if spec is None or (qual == "torch.nn.Linear" and not mod.xla):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        for position, keyword in spec:
            arg = keywords.get(keyword)
            if arg is None and position < len(node.args):
                arg = node.args[position]
            width = mod.names.int_value(arg) if arg is not None else None
            # Widths under one MXU tile (logits, a scalar head) are set by the task, not a
            # choice to round up: padding them costs little next to the hidden layers.
            if width and width >= MIN_JUDGED_WIDTH and width % mxu:
                padded = -(-width // mxu) * mxu
                mod.emit("TPU012", node,
                         f"{keyword}={width} in {source_of(node.func)}() pads to {padded} on the "
                         f"{mxu}-wide MXU ({100 * (padded - width) // padded}% wasted)",
                         fix=f"use a multiple of {mxu}, e.g. {keyword}={padded}")
