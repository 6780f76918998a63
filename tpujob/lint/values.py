"""What local names hold, without running anything: CUDA device strings, tensors, numpy arrays.

Flow-insensitive and per scope (a function, or the module): every value bound to a name in a
scope is collected, and a name is looked up in its own scope, then in the enclosing ones.
- A name holds a CUDA device when *every* binding is one (`device = "cuda"`,
  `f"cuda:{rank}"`): a parameter or a `device = xm.xla_device()` elsewhere in the scope clears
  it, so a device that is only sometimes CUDA is not reported.
- A name holds a tensor when *some* binding is tensor-derived (made by a torch op, or by a
  method of a tensor), or when it is a parameter used as a tensor (annotated `Tensor`, passed
  to a torch/torch_xla function, or the receiver of a method only tensors have). A plain
  `config` parameter, a dict, a `sorted(...)` list or a pandas frame is none of these.
- A name holds a numpy array when some binding is made by numpy and none is a tensor.
- A name holds a host tensor when *every* binding is one: made by a torch factory without a
  `device=` (`torch.tensor(ids)`, `torch.from_numpy(a)`), by `.cpu()`, or derived from one
  without moving it. Torch runs those eagerly on the CPU; XLA never traces them.
"""

from __future__ import annotations

import ast
from typing import Callable

from tpujob.lint.module import Module

# Functions under torch.* that return something other than a tensor.
TORCH_NON_TENSOR = {"device", "dtype", "no_grad", "enable_grad", "inference_mode", "is_tensor",
                    "is_floating_point", "numel", "manual_seed", "seed", "load", "save",
                    "compile", "get_default_dtype", "set_default_dtype", "finfo", "iinfo",
                    "Size", "Generator", "autocast", "set_grad_enabled"}
# Namespaces of tensor functions besides torch.* itself.
TORCH_TENSOR_MODULES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# Methods only tensors have: not numpy arrays, pandas objects, lists or nn.Modules (so not
# `to`, `cuda`, `float` or `requires_grad_`, which modules share).
TENSOR_METHODS = {"backward", "detach", "detach_", "unsqueeze", "unsqueeze_", "permute",
                  "contiguous", "masked_fill", "masked_fill_", "masked_select",
                  "masked_scatter", "masked_scatter_", "index_select", "index_put",
                  "index_put_", "index_add", "index_add_", "index_copy_", "index_fill_",
                  "scatter", "scatter_", "scatter_add", "scatter_add_", "narrow", "numel",
                  "dim", "view_as", "expand", "expand_as", "type_as", "new_zeros",
                  "new_ones", "new_full", "new_empty", "new_tensor", "isfinite", "isnan",
                  "isinf", "softmax", "log_softmax", "bmm", "addmm", "clamp", "clamp_",
                  "float_power", "logical_not", "zero_", "normal_", "uniform_", "fill_",
                  "copy_", "add_", "mul_", "sub_", "div_"}
TENSOR_ATTRS = {"grad", "requires_grad", "grad_fn", "is_leaf", "mT", "mH"}
TENSOR_PARTS = {"T", "data", "grad", "mT", "real", "imag", "values", "indices"}
# Keywords only torch's methods take (numpy and pandas say axis=): `m.all(dim=-1)`,
# `x.nonzero(as_tuple=True)` are tensor calls on tensors.
TENSOR_KEYWORDS = {"dim", "keepdim", "as_tuple"}
# Methods of a tensor whose result is not a tensor.
NON_TENSOR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "data_ptr",
                      "is_contiguous", "element_size", "stride", "get_device"}
# torch factories that make a CPU tensor unless given `device=` (or a default device is set).
HOST_FACTORIES = {"tensor", "as_tensor", "from_numpy", "from_file", "frombuffer", "zeros",
                  "ones", "empty", "full", "arange", "linspace", "rand", "randn", "randint",
                  "randperm", "eye"}
# Methods that may move a tensor off the host.
MOVING_METHODS = {"to", "cuda", "xla", "to_device"}
# The scopes Module records (a lambda's parameters are looked up in the enclosing function).
FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)

Bindings = dict[str, list[ast.expr | None]]  # name -> values bound (None: not followed)
MAX_DEPTH = 100  # expression nesting followed; far beyond real code, well inside the C stack


class Values:
    def __init__(self, mod: Module):
        self.mod = mod
        self.resolve = mod.names.resolve
        self.bound: dict[ast.AST, Bindings] = {}
        self.params: dict[ast.AST, set[str]] = {}
        self._bind_all()
        self._tensor_params: dict[ast.AST, set[str]] = {}
        self._tensor_attrs: set[str] | None = None
        self._sets_default_device: bool | None = None
        # (question, name, scope) -> answer. Each name is judged once: without this, a loop
        # body of `n = n + m; m = m + n` lines is re-walked exponentially often.
        self._judged: dict[tuple[str, str, int], bool] = {}

    # --- bindings ------------------------------------------------------------------------

    def _bind(self, scope: ast.AST, target: ast.AST, value: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            self.bound.setdefault(scope, {}).setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            pairs = (value.elts if isinstance(value, (ast.Tuple, ast.List))
                     and len(value.elts) == len(target.elts) else None)
            for i, element in enumerate(target.elts):
                self._bind(scope, element, pairs[i] if pairs is not None else None)
        elif isinstance(target, ast.Starred):
            self._bind(scope, target.value, None)

    def _bind_all(self) -> None:
        mod = self.mod
        for node in mod.of_type(ast.Assign):
            for target in node.targets:
                self._bind(mod.scope_of[node], target, node.value)
        for node in mod.of_type(ast.AnnAssign, ast.NamedExpr):
            if node.value is not None:
                self._bind(mod.scope_of[node], node.target, node.value)
        for node in mod.of_type(ast.AugAssign):  # x += y keeps x's kind: x + y
            self._bind(mod.scope_of[node], node.target,
                       ast.BinOp(node.target, node.op, node.value))
        for node in mod.of_type(ast.For, ast.AsyncFor, ast.comprehension):
            self._bind(mod.scope_of[node], node.target, None)
        for node in mod.of_type(ast.withitem):
            if node.optional_vars is not None:
                self._bind(mod.scope_of[node], node.optional_vars, None)
        for func in mod.of_type(*FUNCTION_DEFS):
            args = func.args
            names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            self.params[func] = names
            for name in names:
                self.bound.setdefault(func, {}).setdefault(name, []).append(None)

    def _lookup(self, name: str, scope: ast.AST) -> tuple[ast.AST, list[ast.expr | None]]:
        """The innermost scope binding `name` (from `scope` outwards) and its values."""
        while True:
            values = self.bound.get(scope, {}).get(name)
            if values is not None:
                return scope, values
            outer = self.mod.scope_of.get(scope, scope)
            if outer is scope:
                return scope, []
            scope = outer

    def _judge(self, question: str, name: str, scope: ast.AST, answer) -> bool:
        """Memoised answer(where, values) for the binding of `name` seen from `scope`."""
        where, values = self._lookup(name, scope)
        key = (question, name, id(where))
        if key not in self._judged:
            self._judged[key] = False  # a name defined through itself (x = x + 1) adds nothing
            self._judged[key] = answer(where, values)
        return self._judged[key]

    # --- CUDA device strings -------------------------------------------------------------

    def is_cuda(self, node: ast.AST | None, scope: ast.AST, depth: int = 0) -> bool:
        """"cuda", "cuda:1", f"cuda:{rank}", or a name every binding of which is one."""
        if node is None or depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and (node.value == "cuda"
                                                    or node.value.startswith("cuda:"))
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            return (isinstance(head, ast.Constant) and isinstance(head.value, str)
                    and head.value.startswith("cuda:"))
        if isinstance(node, ast.Call) and self.resolve(node.func) == "torch.device":
            return bool(node.args) and self.is_cuda(node.args[0], scope, depth + 1)
        if isinstance(node, ast.Name):
            return self._judge("cuda", node.id, scope, lambda where, values: bool(values) and all(
                self.is_cuda(v, where, depth + 1) for v in values))
        return False

    # --- tensors -------------------------------------------------------------------------

    def is_tensor(self, node: ast.AST | None, scope: ast.AST, depth: int = 0) -> bool:
        if node is None or depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Name):
            return self._judge("tensor", node.id, scope, lambda where, values: (
                node.id in self.tensor_params(where)
                or any(self.is_tensor(v, where, depth + 1) for v in values)))
        if isinstance(node, ast.Call):
            return self._returns_tensor(node, scope, depth)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return node.attr in self.tensor_attrs()
            # .values/.indices: of torch.max(dim=)/topk/sort results, named tuples of tensors
            return node.attr in TENSOR_PARTS and self.is_tensor(node.value, scope, depth + 1)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value, scope, depth + 1)
        if isinstance(node, ast.BinOp):
            return (self.is_tensor(node.left, scope, depth + 1)
                    or self.is_tensor(node.right, scope, depth + 1))
        if isinstance(node, ast.UnaryOp):
            return self.is_tensor(node.operand, scope, depth + 1)
        if isinstance(node, ast.Compare):
            return any(self.is_tensor(n, scope, depth + 1) for n in [node.left, *node.comparators])
        if isinstance(node, ast.IfExp):
            return (self.is_tensor(node.body, scope, depth + 1)
                    or self.is_tensor(node.orelse, scope, depth + 1))
        return False

    def _returns_tensor(self, call: ast.Call, scope: ast.AST, depth: int) -> bool:
        qual = self.resolve(call.func)
        if qual is not None:
            return _torch_tensor_function(qual)
        if not isinstance(call.func, ast.Attribute):
            return False
        method = call.func.attr
        if method in NON_TENSOR_METHODS:
            return False
        return (method in TENSOR_METHODS or _tensor_keywords(call)
                or self.is_tensor(call.func.value, scope, depth + 1))

    # --- numpy arrays ---------------------------------------------------------------------

    def is_numpy(self, node: ast.AST | None, scope: ast.AST, depth: int = 0) -> bool:
        """Made by numpy (`np.asarray(...)`, `arr[mask]`, `arr > 0`, `arr.reshape(...)`), and
        no binding of it a tensor: host-side arrays XLA never sees."""
        if node is None or depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Name):
            return self._judge("numpy", node.id, scope, lambda where, values: (
                node.id not in self.tensor_params(where)
                and any(self.is_numpy(v, where, depth + 1) for v in values)
                and not any(self.is_tensor(v, where, depth + 1) for v in values)))
        if isinstance(node, ast.Call):
            qual = self.resolve(node.func)
            if qual is not None:
                return qual.startswith("numpy.")
            if isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" \
                    and not node.args:
                return True  # a tensor's .numpy(): an array on the host
            return (isinstance(node.func, ast.Attribute) and not self._returns_tensor(
                node, scope, depth) and self.is_numpy(node.func.value, scope, depth + 1))
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            return self.is_numpy(node.value, scope, depth + 1)
        operands = {ast.BinOp: lambda n: [n.left, n.right], ast.UnaryOp: lambda n: [n.operand],
                    ast.Compare: lambda n: [n.left, *n.comparators]}.get(type(node))
        if operands is None:
            return False
        parts = operands(node)
        return (any(self.is_numpy(p, scope, depth + 1) for p in parts)
                and not any(self.is_tensor(p, scope, depth + 1) for p in parts))

    # --- host tensors ---------------------------------------------------------------------

    def is_host_tensor(self, node: ast.AST | None, scope: ast.AST, depth: int = 0) -> bool:
        """A CPU tensor: `torch.tensor(ids)`, `out.cpu()`, `(t == eot)` of one, a name every
        binding of which is one. Parameters and attributes are not known to be."""
        if node is None or depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Name):
            return self._judge("host", node.id, scope, lambda where, values: bool(values) and all(
                self.is_host_tensor(v, where, depth + 1) for v in values))
        if isinstance(node, ast.Call):
            return self._makes_host_tensor(node, scope, depth)
        if isinstance(node, ast.Subscript):
            return self.is_host_tensor(node.value, scope, depth + 1)
        operands = {ast.BinOp: lambda n: [n.left, n.right], ast.UnaryOp: lambda n: [n.operand],
                    ast.Compare: lambda n: [n.left, *n.comparators]}.get(type(node))
        if operands is None:
            return False
        # `t == eot` of a host tensor is one; `t + w` with a device tensor `w` is not.
        tensors = [p for p in operands(node) if self.is_tensor(p, scope, depth + 1)]
        return bool(tensors) and all(self.is_host_tensor(p, scope, depth + 1) for p in tensors)

    def _makes_host_tensor(self, call: ast.Call, scope: ast.AST, depth: int) -> bool:
        qual = self.resolve(call.func)
        if qual is not None:
            if self._default_device() or not _is_factory(qual):
                return False
            device = next((k.value for k in call.keywords if k.arg == "device"), None)
            if device is not None and not (isinstance(device, ast.Constant)
                                           and device.value == "cpu"):
                return False
            # torch.tensor(t) and torch.as_tensor(t) keep the device of a tensor `t`.
            data = call.args[0] if call.args else None
            return not (self.is_tensor(data, scope, depth + 1)
                        and not self.is_host_tensor(data, scope, depth + 1))
        if not isinstance(call.func, ast.Attribute):
            return False
        method = call.func.attr
        if method == "cpu":
            return True
        if method == "to" and _to_keeps_device(call, self.resolve):
            return self.is_host_tensor(call.func.value, scope, depth + 1)
        return (method not in MOVING_METHODS and method not in NON_TENSOR_METHODS
                and self.is_host_tensor(call.func.value, scope, depth + 1))

    def _default_device(self) -> bool:
        """`torch.set_default_device(...)` anywhere: factories may then make device tensors."""
        if self._sets_default_device is None:
            self._sets_default_device = any(
                self.resolve(c.func) == "torch.set_default_device"
                for c in self.mod.of_type(ast.Call))
        return self._sets_default_device

    def tensor_params(self, scope: ast.AST) -> set[str]:
        """The parameters of a function that its body uses as tensors."""
        if scope not in self._tensor_params:
            params = self.params.get(scope, set())
            self._tensor_params[scope] = _used_as_tensors(scope, params, self.resolve) \
                if params else set()
        return self._tensor_params[scope]

    def tensor_attrs(self) -> set[str]:
        """`self.X` attributes assigned a tensor (or an nn.Parameter), or registered buffers."""
        if self._tensor_attrs is None:
            found: set[str] = set()
            self._tensor_attrs = found  # guards the recursion through is_tensor
            for node in self.mod.of_type(ast.Assign):
                targets = [t for t in node.targets if isinstance(t, ast.Attribute)
                           and isinstance(t.value, ast.Name) and t.value.id == "self"]
                if targets and (self.is_tensor(node.value, self.mod.scope_of[node])
                                or (self.resolve(getattr(node.value, "func", None)) or "")
                                .endswith("nn.Parameter")):
                    found.update(t.attr for t in targets)
            for call in self.mod.of_type(ast.Call):
                if (isinstance(call.func, ast.Attribute) and call.func.attr == "register_buffer"
                        and call.args and isinstance(call.args[0], ast.Constant)
                        and isinstance(call.args[0].value, str)):
                    found.add(call.args[0].value)
        return self._tensor_attrs


def _torch_tensor_function(qual: str) -> bool:
    """torch.zeros, torch.cat, F.pad, torch.linalg.norm...: functions that return tensors."""
    if qual.startswith(TORCH_TENSOR_MODULES):
        return True
    parts = qual.split(".")
    return len(parts) == 2 and parts[0] == "torch" and parts[1] not in TORCH_NON_TENSOR


def _is_factory(qual: str) -> bool:
    """torch.tensor, torch.zeros...: a new tensor, on the CPU unless told otherwise."""
    module, _, name = qual.rpartition(".")
    return module == "torch" and name in HOST_FACTORIES


def _to_keeps_device(call: ast.Call, resolve) -> bool:
    """`.to(torch.int32)`, `.to(dtype=...)`: a dtype change that leaves the tensor where it is."""
    if any(k.arg not in ("dtype", "non_blocking", "copy") for k in call.keywords):
        return False
    return all((resolve(a) or "").startswith("torch.") for a in call.args)


def _tensor_keywords(call: ast.Call) -> bool:
    return any(k.arg in TENSOR_KEYWORDS for k in call.keywords)


def _used_as_tensors(func: ast.AST, params: set[str],
                     resolve: Callable[[ast.AST | None], str | None]) -> set[str]:
    found: set[str] = set()
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return found  # (a scope with parameters is a function)
    args = func.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        if arg.annotation is not None and any(
                (isinstance(n, ast.Name) and n.id == "Tensor")
                or (isinstance(n, ast.Attribute) and n.attr == "Tensor")
                or (isinstance(n, ast.Constant) and isinstance(n.value, str)  # "torch.Tensor"
                    and n.value.rsplit(".", 1)[-1] == "Tensor")
                for n in ast.walk(arg.annotation)):
            found.add(arg.arg)
    body = func.body if isinstance(func.body, list) else [func.body]
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call):
            qual = resolve(node.func) or ""
            # A factory takes lists, arrays, paths and sizes: `torch.tensor(ids)` says nothing
            # about `ids`.
            if qual.startswith(("torch.", "torch_xla.")) and not _is_factory(qual):
                passed = node.args + [k.value for k in node.keywords]
                found.update(a.id for a in passed if isinstance(a, ast.Name) and a.id in params)
            if (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                    and (node.func.attr in TENSOR_METHODS or _tensor_keywords(node))):
                found.add(node.func.value.id)
        elif (isinstance(node, ast.Attribute) and node.attr in TENSOR_ATTRS
              and isinstance(node.value, ast.Name)):
            found.add(node.value.id)
    return found & params
