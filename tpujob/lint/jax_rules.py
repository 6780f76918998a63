"""Rules for JAX code: pmap (TPU010), traced control flow (TPU011), host syncs in the step
loop (TPU006), and layer widths against the MXU (TPU012).

Traced functions are found however they are made: `@jax.jit`, `jax.jit(f)`,
`jax.jit(functools.partial(f, cfg=...))`, `jax.jit(self.method)`, `nnx.jit`, `pjit`,
`shard_map`, `pmap`, a library's `*_jit` (equinox's filter_jit, haliax's named_jit), a
wrapper of the project's own (`def compile(fn): return jax.jit(fn, ...)`), or any call that
hands a function of this module to one of those (`jax.jit(make_step(train_step, cfg=...))`).
Arguments bound by the partial or the wrapper (`cfg`) are Python values, not traced.

Inside a traced function the arguments are abstract values: Python `if`/`while`/`range()`
on them, or a slice whose bound comes from them (`x[:x.sum()]`), raises at trace time.
Shapes, dtypes (`x.ndim`, `jnp.ndim(x)`, `jax.typeof(x)`), `x.at[mask].set(0)` (same
shape) and arguments named in static_argnums/static_argnames are concrete and fine. A value
follows a traced one through array operations (arithmetic, methods, jax/jnp/lax/numpy
functions), not through calls to other functions, whose results the lint cannot see.
"""

from __future__ import annotations

import ast

from tpujob.lint.jax_loops import check_step_loops
from tpujob.lint.module import Module, source_of
from tpujob.lint.names import call_name

# The last component of a qualified name that compiles (and so traces) a function.
JIT_NAMES = {"jit", "pjit", "pmap", "shard_map", "xmap", "filter_jit", "filter_pmap",
             "named_jit"}
NOT_JAX = ("numba.", "torch.", "tensorflow.")  # their `jit`s trace nothing of JAX's
PARTIALS = {"functools.partial"}
# Functions of array values (jax's own internals, `jax._src.core`, are not).
ARRAY_MODULES = ("jax.numpy.", "jax.lax.", "jax.nn.", "jax.scipy.", "jax.random.", "numpy.",
                 "math.")
BUILTIN_ARITH = {"abs", "min", "max", "sum", "round", "pow", "divmod"}
STATIC_ATTRS = {"shape", "ndim", "dtype", "size", "sharding", "aval", "weak_type"}
# Calls that read only an argument's type or structure (`jnp.ndim(x)`, `jax.typeof(x)`): the
# abstract value is concrete while tracing, as `x.ndim` is.
STATIC_CALLS = {"len", "isinstance", "type", "hasattr", "callable", "id", "ndim", "shape",
                "isscalar", "typeof", "result_type", "iscomplexobj", "isrealobj", "issubdtype",
                "axis_size", "dtype"}
CONCRETE_CALLS = {"int", "float", "bool", "range"}
# Layers whose widths reach the MXU: qualified name -> (position, keyword) of the output
# width, the one a modeller chooses. An input width is whatever the layer before produces
# (a flattened conv stack's 3136, 320) and is judged where that layer is.
LAYERS: dict[str, tuple[tuple[int, str], ...]] = {
    "flax.linen.Dense": ((0, "features"),),
    "flax.nnx.Linear": ((1, "out_features"),),
    "haiku.Linear": ((0, "output_size"),),
    "equinox.nn.Linear": ((1, "out_features"),),
    "torch.nn.Linear": ((1, "out_features"),),
}
MIN_WASTE = 0.10  # padding under a tenth of the tile's work is noise next to everything else
MXU_BY_GENERATION = {"v6e": 256}
MIN_JUDGED_WIDTH = 128  # the MXU tile on every generation


def mxu_width(generation_alias: str | None) -> int:
    return MXU_BY_GENERATION.get(generation_alias or "", 128)


def check(mod: Module) -> None:
    names = mod.names
    jax = names.imports("jax") or names.imports("flax")
    if jax and mod.enabled("TPU006", "TPU010", "TPU011"):
        jits = Jits(mod)
        for node in mod.of_type(ast.Name, ast.Attribute):
            if names.resolve(node) == "jax.pmap":
                mod.emit("TPU010", node, source_of(node))
        for func, static in jits.functions:
            _check_traced(mod, func, static)
        if mod.enabled("TPU006"):
            check_step_loops(mod, jits.callables)
    if mod.enabled("TPU012") and (jax or names.imports("haiku") or names.imports("equinox")
                                   or mod.xla):
        _layer_widths(mod)


class Jits:
    """The traced functions of a module, and the names bound to compiled callables."""

    def __init__(self, mod: Module):
        self.mod = mod
        self.defs: dict[str, list[ast.FunctionDef]] = {}
        for node in mod.of_type(ast.FunctionDef):
            self.defs.setdefault(node.name, []).append(node)
        self.wrappers = self._wrappers()
        self.functions: list[tuple[ast.FunctionDef, set[str]]] = []
        self.callables: set[str] = set()  # names (or attributes) holding compiled functions
        self._find()

    def is_jit(self, node: ast.AST) -> bool:
        qual = self.mod.names.resolve(node)
        if qual:
            if qual.startswith(NOT_JAX):
                return False
            last = qual.rsplit(".", 1)[-1]
            return last in JIT_NAMES or last.endswith("_jit")
        return isinstance(node, ast.Name) and node.id in getattr(self, "wrappers", ())

    def _wrappers(self) -> set[str]:
        """Functions of this module that jit their first parameter: `def compile(fn, **kw):
        return jax.jit(fn, **kw)`."""
        found: set[str] = set()
        for _ in range(2):  # a wrapper of a wrapper
            self.wrappers = found
            for call in self.mod.of_type(ast.Call):
                if not (call.args and isinstance(call.args[0], ast.Name)
                        and self.is_jit(call.func)):
                    continue
                func = self.mod.scope_of.get(call)
                if not isinstance(func, ast.FunctionDef):
                    continue
                params = [a.arg for a in func.args.posonlyargs + func.args.args]
                params = params[1:] if params[:1] in (["self"], ["cls"]) else params
                if params and call.args[0].id == params[0]:
                    found = found | {func.name}
        return found

    def _options(self, node: ast.expr) -> ast.Call | bool | None:
        """For a decorator: the jit call carrying the options, True for a bare @jax.jit."""
        if self.is_jit(node):
            return True
        if isinstance(node, ast.Call):
            if self.is_jit(node.func):
                return node
            if self.mod.names.resolve(node.func) in PARTIALS and node.args \
                    and self.is_jit(node.args[0]):
                return node
        return None

    def _find(self) -> None:
        mod = self.mod
        for node in mod.of_type(ast.FunctionDef):
            for decorator in node.decorator_list:
                options = self._options(decorator)
                if options is not None:
                    static = _static_params(node, options)
                    if self._filters(decorator):
                        static |= _scalar_params(node)
                    self.functions.append((node, static))
                    self.callables.add(node.name)
        for node in mod.of_type(ast.Call):
            if self.is_jit(node.func) and node.args:
                self.functions.extend(self._targets(node))
        for node in mod.of_type(ast.Assign):
            if any(isinstance(n, ast.Call) and self.is_jit(n.func) for n in ast.walk(node.value)):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.callables.add(target.id)
                    elif isinstance(target, ast.Attribute):
                        self.callables.add(target.attr)

    def _targets(self, call: ast.Call) -> list[tuple[ast.FunctionDef, set[str]]]:
        """The functions of this module a jit call traces, with their static parameters."""
        target: ast.expr = call.args[0]
        bound_positional = 0
        bound_names: set[str] = set()
        bound_keywords = False  # partial(f, **options): any keyword-only parameter may be bound
        for _ in range(3):  # partial(f, ...), a wrapper make_step(f, cfg=...), nested
            if isinstance(target, ast.Call) and target.args:
                bound_positional += len(target.args) - 1
                bound_names |= {k.arg for k in target.keywords if k.arg}
                bound_keywords |= any(k.arg is None for k in target.keywords)
                target = target.args[0]
            else:
                break
        bound_self = isinstance(target, ast.Attribute)
        if isinstance(target, ast.Name):
            defs = self._visible(target.id, call)
        elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
              and target.value.id in ("self", "cls")):
            defs = self.defs.get(target.attr, [])
        else:
            return []
        found = []
        for func in defs:
            positional = [a.arg for a in func.args.posonlyargs + func.args.args
                          if a.arg not in ("self", "cls")]
            static = (_static_params(func, call, bound_self) | set(positional[:bound_positional])
                      | bound_names)
            if bound_keywords:
                static |= {a.arg for a in func.args.kwonlyargs}
            if self._filters(call):
                static |= _scalar_params(func)
            found.append((func, static))
        return found

    def _visible(self, name: str, at: ast.AST) -> list[ast.FunctionDef]:
        """The definitions `name` means where `at` is, scope by scope outwards: a parameter of
        an enclosing function (`def _pjit(self, fn): return pjit(fn)`) hides every `def fn`,
        and a closure defined elsewhere is not visible."""
        defs = self.defs.get(name, [])
        scope: ast.AST | None = self.mod.scope_of.get(at)
        while scope is not None and defs:
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = scope.args
                if name in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}:
                    return []
            local = [d for d in defs if self.mod.scope_of.get(d) is scope]
            if local:
                return local
            outer = self.mod.scope_of.get(scope)
            scope = None if outer is scope else outer
        return []

    def _filters(self, options: ast.AST) -> bool:
        """equinox's filter_jit (and what wraps it): non-array arguments are static."""
        node = options.func if isinstance(options, ast.Call) else options
        qual = self.mod.names.resolve(node) or ""
        return qual.rsplit(".", 1)[-1].startswith("filter_")


SCALAR_TYPES = {"int", "bool", "str", "float"}


def _scalar_params(func: ast.FunctionDef) -> set[str]:
    """Parameters annotated as Python scalars (`seq_id: int`): static under filter_jit,
    which traces only arrays."""
    args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
    return {a.arg for a in args if isinstance(a.annotation, ast.Name)
            and a.annotation.id in SCALAR_TYPES}


def _static_params(func: ast.FunctionDef, options: ast.Call | bool,
                   bound_self: bool = False) -> set[str]:
    """Parameters the jit call's options make static: static_argnums/static_argnames, and
    shard_map's arguments whose in_specs entry is None (not sharded: Python values).
    `bound_self`: jit(self.method) counts positions after `self`."""
    positional = [a.arg for a in func.args.posonlyargs + func.args.args]
    if bound_self and positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
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
        elif keyword.arg == "in_specs" and isinstance(keyword.value, (ast.Tuple, ast.List)):
            static.update(name for name, spec in zip(positional, keyword.value.elts)
                          if isinstance(spec, ast.Constant) and spec.value is None)
    return static


def _dynamic_use(node: ast.AST, traced: set[str], resolve) -> str | None:
    """The traced name used for its value in `node` (not its shape or identity), else None."""
    if isinstance(node, ast.Name):
        return node.id if node.id in traced else None
    if isinstance(node, ast.Attribute) and node.attr in STATIC_ATTRS:
        return None
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        # [a.shape for a in xs] is traced only through its element; a target is traced when
        # what it iterates is.
        inner = set(traced)
        for generator in node.generators:
            names = {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
            inner = inner | names if _dynamic_use(generator.iter, inner, resolve) \
                else inner - names
        return _dynamic_use(node.elt, inner, resolve)
    if isinstance(node, ast.Call):
        name = call_name(node).lstrip("_")  # lax._ndim(x) too
        if name in STATIC_CALLS or name.startswith(("is_", "has_")):
            return None  # scope.is_mutable_collection(...), x.is_fully_replicated(): structure
        qual = resolve(node.func)
        if qual is not None:
            if not qual.startswith(ARRAY_MODULES):
                return None  # another library's function: its result is not known to be traced
            operands = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node.func, ast.Attribute):
            operands = [node.func.value]  # x.sum(), x.astype(...): traced when x is
        elif isinstance(node.func, ast.Name) and node.func.id in BUILTIN_ARITH | CONCRETE_CALLS:
            operands = [*node.args]
        else:
            return None  # a function of this module or a parameter: its result is unknown
        return next((u for o in operands if (u := _dynamic_use(o, traced, resolve))), None)
    if isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Constant) and isinstance(c.value, str)
            for c in [node.left, *node.comparators]):
        return None  # `v.tag == "hello"`: an array is never compared with a string: metadata
    if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                             for op in node.ops):
        # Identity and membership (`"bias" in params`) look at the pytree's structure, which
        # is static under tracing; only comparisons of array values are traced.
        return None
    for child in ast.iter_child_nodes(node):
        used = _dynamic_use(child, traced, resolve)
        if used:
            return used
    return None


def _check_traced(mod: Module, func: ast.FunctionDef, static: set[str]) -> None:
    resolve = mod.names.resolve
    args = func.args
    traced = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} - static - {"self"}
    # A parameter defaulting to a Python constant (`_no_hooks=False`, `mode="train"`) is a
    # configuration flag: callers that leave it out get the constant, not a tracer.
    positional = args.posonlyargs + args.args
    defaults = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    traced -= {a.arg for a, d in defaults if isinstance(d, ast.Constant)}
    if args.vararg:
        traced.add(args.vararg.arg)
    body = [n for stmt in func.body for n in ast.walk(stmt)]
    for _ in range(2):  # y = x * 2 makes y traced too; n = x.shape[0] does not
        for node in body:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value \
                    and _dynamic_use(node.value, traced, resolve):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    traced.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    for node in body:
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            # `if state.dynamic_scale:` tests an optional part of the pytree, which is
            # static; a traced array's own truth would fail for any non-scalar.
            used = None if isinstance(node.test, (ast.Name, ast.Attribute)) else \
                _dynamic_use(node.test, traced, resolve)
            if used:
                kind = {ast.If: "if", ast.While: "while", ast.IfExp: "conditional expression",
                        ast.Assert: "assert"}[type(node)]
                mod.emit("TPU011", node, f"Python {kind} on traced {used!r} in jitted "
                                         f"{func.name}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in CONCRETE_CALLS:
            used = next((u for a in node.args if (u := _dynamic_use(a, traced, resolve))), None)
            if used:
                mod.emit("TPU011", node, f"{node.func.id}() of traced {used!r} in jitted "
                                         f"{func.name}()")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and not (
                isinstance(node.value, ast.Attribute) and node.value.attr == "at"):
            # x.at[mask].set(0) keeps x's shape: a masked update, not a dynamic slice.
            index = node.slice
            parts = index.elts if isinstance(index, ast.Tuple) else [index]
            for part in parts:
                bounds = [part.lower, part.upper, part.step] if isinstance(part, ast.Slice) \
                    else [part] if isinstance(part, ast.Compare) else []
                used = next((u for b in bounds if b is not None
                             and (u := _dynamic_use(b, traced, resolve))), None)
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
            padded = -(-width // mxu) * mxu if width else 0
            if width and width >= MIN_JUDGED_WIDTH and (padded - width) / padded >= MIN_WASTE:
                mod.emit("TPU012", node,
                         f"{keyword}={width} in {source_of(node.func)}() pads to {padded} on the "
                         f"{mxu}-wide MXU ({100 * (padded - width) // padded}% wasted)",
                         fix=f"use a multiple of {mxu}, e.g. {keyword}={padded}")
