"""The lint rules (data) and the finding they produce.

Each rule encodes a lesson from researchers' public write-ups about moving PyTorch or JAX
training code to TPUs: the failures are silent (wrong statistics, graphs that grow without
bound, recompilation on every step) or come after a slice was paid for, so they are worth
catching on the workstation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

ERROR = "error"  # the code is wrong on TPU, or certainly slow there
WARNING = "warning"  # slow on TPU in the usual case
NOTE = "note"  # advice: a better way, or one that depends on versions the lint cannot see
SEVERITIES = (NOTE, WARNING, ERROR)  # ascending; `--min-severity` keeps this one and above


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    message: str  # one line: what is wrong and why it matters on TPU
    fix: str  # one line: what to write instead
    deps: bool = False  # also checked in the installed packages named by --deps


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based, as editors and other linters count
    rule: str
    severity: str
    message: str
    fix: str
    symbol: str = ""  # enclosing class/function, e.g. "AttnProcessor2_0.__call__"
    cell: int | None = None  # a notebook's cell index (`line` then counts within the cell)

    def to_dict(self) -> dict:
        return asdict(self)


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule("TPU000", ERROR, "file does not parse as Python",
             "fix the syntax error or exclude the file (.gitignore in the sync dir)", deps=True),
        Rule("TPU001", ERROR,
             "torch's activation checkpointing saves no memory under XLA (the compiler "
             "merges the recomputation away)",
             "use torch_xla.utils.checkpoint.checkpoint"),
        Rule("TPU002", ERROR,
             "scaled_dot_product_attention fails on TorchXLA",
             "replace it with explicit attention: softmax(q @ k.transpose(-2, -1) * scale "
             "+ mask) @ v", deps=True),
        Rule("TPU003", ERROR, "CUDA device in torch_xla code",
             "use torch_xla.device() (or xm.xla_device()) and .to(device)"),
        Rule("TPU004", NOTE,
             "DistributedDataParallel in torch_xla code traces the DDP runtime every step: "
             "torch_xla's own measurements find it 5% (ResNet-50) to 41% (MNIST) slower "
             "than its native data parallelism",
             "launch with torch_xla.launch / xmp.spawn and reduce gradients with "
             "xm.optimizer_step(optimizer)"),
        Rule("TPU005", ERROR,
             "training loop (backward + optimizer step) never cuts the XLA graph: it grows "
             "every iteration",
             "call xm.mark_step() once per iteration, use `with torch_xla.step():`, "
             "xm.optimizer_step(optimizer) or iterate over pl.MpDeviceLoader"),
        Rule("TPU006", WARNING,
             "host sync inside the training loop: the host waits for the step to finish "
             "before it can dispatch the next, every iteration",
             "keep values on device; read them every N steps (`if step % N == 0:`), with "
             "xm.add_step_closure (PyTorch/XLA) or after the loop"),
        Rule("TPU007", WARNING,
             "dynamic shape: the output size depends on tensor values, so XLA recompiles "
             "for every new size",
             "pad to a fixed size and carry a mask (e.g. torch.where(mask, x, 0))"),
        Rule("TPU008", WARNING,
             "index assignment on a sharded tensor in SPMD code triggers an implicit "
             "all-gather",
             "update with a manual-sharding scatter (e.g. scatter_/index_put on the local "
             "shard) or a mask: torch.where(mask, v, a)"),
        Rule("TPU009", WARNING,
             "nn.init in torch_xla code is known to produce wrong statistics",
             "initialise manually (tensor.normal_(0, std) under torch.no_grad()) and check "
             "mean/std of each weight after init"),
        Rule("TPU010", NOTE,
             "pmap compiles one program per device and does no SPMD partitioning",
             "use jax.jit with NamedSharding over a jax.sharding.Mesh (or shard_map)"),
        Rule("TPU011", ERROR,
             "Python control flow or slicing on a traced value inside jax.jit (pjit, "
             "shard_map, nnx.jit...) fails at trace time (or needs a concrete shape)",
             "use jnp.where / jax.lax.cond / jax.lax.fori_loop, or slice to a static size "
             "with a mask; mark true constants static_argnums"),
        Rule("TPU012", WARNING,
             "layer width is not a multiple of the MXU size: the matrix unit pads it and "
             "wastes compute",
             "round the width up to a multiple of the MXU size"),
    )
}


def finding(rule_id: str, path: str, line: int, col: int, *, detail: str = "",
            symbol: str = "", fix: str = "", severity: str = "") -> Finding:
    """A finding for rule_id; `detail` is prefixed to the rule's message, `fix` and `severity`
    replace the rule's."""
    rule = RULES[rule_id]
    message = f"{detail}: {rule.message}" if detail else rule.message
    return Finding(path, line, col, rule.id, severity or rule.severity, message,
                   fix or rule.fix, symbol)
