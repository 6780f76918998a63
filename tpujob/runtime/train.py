"""Mesh, FSDP shardings, optimizer, and the train step: jitted once, state donated.

One mesh axis ("fsdp") over every device of a slice: the batch is split along it, and each
parameter (and its Adam moments) is split along its largest dimension that divides evenly, so
memory per device falls with the slice size. XLA inserts the all-gathers and reduce-scatters.
Several slices (multislice) add an outer axis ("slices", over DCN): data parallel across
slices, each holding its own copy of the state sharded as on one slice, so only the gradients'
all-reduce crosses DCN.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .config import RuntimeConfig
from .model import DECAYED, init_params, loss_fn

AXIS = "fsdp"
SLICES_AXIS = "slices"


class RecompileError(RuntimeError):
    pass


def make_mesh(num_slices: int = 1) -> Mesh:
    devices = jax.devices()
    if num_slices == 1:
        return Mesh(np.array(devices), (AXIS,))
    hosts_per_slice = max(jax.process_count() // num_slices, 1)

    # A TPU device of a multislice job knows its slice; a CPU one (the emulator's hosts) says
    # 0 or nothing: then hosts are slice-major (contract.ENV_NUM_SLICES).
    known = {getattr(d, "slice_index", None) for d in devices} == set(range(num_slices))

    def slice_of(d) -> int:
        return d.slice_index if known else d.process_index // hosts_per_slice

    ordered = sorted(devices, key=lambda d: (slice_of(d), d.process_index, d.id))
    if len(ordered) % num_slices or {slice_of(d) for d in ordered} != set(range(num_slices)):
        raise ValueError(f"{len(ordered)} devices do not make {num_slices} equal slices")
    return Mesh(np.array(ordered).reshape(num_slices, -1), (SLICES_AXIS, AXIS))


def batch_axes(mesh: Mesh) -> Any:
    """The mesh axes the batch is split over: every device, slice by slice."""
    return (SLICES_AXIS, AXIS) if SLICES_AXIS in mesh.axis_names else AXIS


def param_spec(shape: tuple[int, ...], n: int) -> P:
    """Shard the largest dim divisible by n (skipping a stacked-layer axis); replicate if none."""
    if n == 1 or not shape:
        return P()
    dims = range(1 if len(shape) == 3 else 0, len(shape))
    candidates = [d for d in dims if shape[d] % n == 0]
    if not candidates:
        return P()
    best = max(candidates, key=lambda d: shape[d])
    return P(*[AXIS if d == best else None for d in range(len(shape))])


def make_schedule(cfg: RuntimeConfig) -> optax.Schedule:
    o = cfg.optimizer
    warmup = min(o.warmup_steps, cfg.decay_steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=o.lr, warmup_steps=warmup,
        decay_steps=max(cfg.decay_steps, warmup + 1), end_value=o.lr * o.min_lr_ratio,
    )


def make_optimizer(cfg: RuntimeConfig) -> optax.GradientTransformation:
    o = cfg.optimizer

    def decay_mask(params):
        return {k: decay_mask(v) if isinstance(v, dict) else k in DECAYED for k, v in params.items()}

    return optax.chain(
        optax.clip_by_global_norm(o.grad_clip),
        optax.adamw(make_schedule(cfg), b1=o.beta1, b2=o.beta2, weight_decay=o.weight_decay,
                    mask=decay_mask),
    )


def init_state_fn(cfg: RuntimeConfig) -> Callable[[jax.Array], dict]:
    tx = make_optimizer(cfg)

    def init(key):
        params = init_params(cfg.model, cfg.seq_len, key, bad=cfg.inject_bad_init)
        return {"step": jnp.zeros((), jnp.int32), "params": params, "opt": tx.init(params)}

    return init


def state_shardings(cfg: RuntimeConfig, mesh: Mesh) -> Any:
    shapes = jax.eval_shape(init_state_fn(cfg), jax.random.key(0))
    n = mesh.shape[AXIS]  # within a slice: each slice holds a whole copy
    return jax.tree.map(lambda s: NamedSharding(mesh, param_spec(s.shape, n)), shapes)


def abstract_state(cfg: RuntimeConfig, mesh: Mesh) -> Any:
    """Shapes, dtypes and shardings of the state: the target a checkpoint is restored into."""
    shapes = jax.eval_shape(init_state_fn(cfg), jax.random.key(0))
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        shapes, state_shardings(cfg, mesh))


def init_state(cfg: RuntimeConfig, mesh: Mesh) -> dict:
    init = jax.jit(init_state_fn(cfg), out_shardings=state_shardings(cfg, mesh))
    return init(jax.random.key(cfg.seed))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(batch_axes(mesh)))


def accumulated_grads(value_and_grad: Callable, params: Any, tokens: jax.Array, parts: int) -> tuple:
    """The loss and gradients of the whole batch, computed `parts` rows-groups at a time and
    averaged (equal parts and a mean loss: the same as the batch at once, up to float32
    summation order). Part i is every `parts`-th row from row i, so each device's rows hold an
    equal share of every part and no part moves between devices."""
    if parts == 1:
        return value_and_grad(params, tokens)
    split = tokens.reshape(tokens.shape[0] // parts, parts, tokens.shape[1]).swapaxes(0, 1)

    def add(total, part):
        loss, grads = value_and_grad(params, part)
        return (total[0] + loss, jax.tree.map(jnp.add, total[1], grads)), None

    zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
    (loss, grads), _ = jax.lax.scan(add, zero, split)
    return loss / parts, jax.tree.map(lambda g: g / parts, grads)


def train_step_fn(cfg: RuntimeConfig) -> Callable:
    """(state, tokens (B, T+1), flags (n_devices, 2)) -> (state, metrics)."""
    tx = make_optimizer(cfg)
    schedule = make_schedule(cfg)

    def step(state, tokens, flags):
        # flags[:, 0]: a host got SIGTERM; flags[:, 1]: the NaN drill. A runtime input, so the
        # drill needs no separate program; multiplying by 1.0 is exact, so it changes nothing.
        poison = jnp.where(jnp.max(flags[:, 1]) > 0, jnp.nan, 1.0).astype(jnp.float32)

        def loss_of(params, part):
            return loss_fn(cfg.model, params, part[:, :-1], part[:, 1:]) * poison

        loss, grads = accumulated_grads(jax.value_and_grad(loss_of), state["params"], tokens,
                                        cfg.microbatches)
        updates, opt = tx.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = {
            "loss": loss,
            "grad_norm": optax.global_norm(grads),
            "lr": schedule(state["step"]),
            # Any host's SIGTERM, seen by every host at the same step: they checkpoint together.
            "stop": jnp.max(flags[:, 0]),
        }
        return {"step": state["step"] + 1, "params": params, "opt": opt}, metrics

    return step


# JAX's persistent compilation cache reports each lookup (compile_requests_use_cache) and each
# hit as monitoring events. A miss is reported only where the entry is written, and JAX writes
# from process 0 alone (jax/_src/compiler.py: "Only write cache entries from the first
# process"), so a lookup without a hit is the miss on every process.
CACHE_EVENTS = {"hits": 0, "lookups": 0}
_CACHE_EVENT_NAMES = {"/jax/compilation_cache/cache_hits": "hits",
                      "/jax/compilation_cache/compile_requests_use_cache": "lookups"}


def _count_cache_event(event: str, **_: Any) -> None:
    if (name := _CACHE_EVENT_NAMES.get(event)) is not None:
        CACHE_EVENTS[name] += 1


jax.monitoring.register_event_listener(_count_cache_event)


class StepCompiler:
    """Compiles the train step ahead of time per input signature, and counts the compiles.

    The first compile is expected; any later one means a shape or dtype changed mid-run, which
    stalls a TPU for minutes each time: reported always, refused under strict_shapes.
    """

    def __init__(self, cfg: RuntimeConfig, mesh: Mesh):
        repl = NamedSharding(mesh, P())
        shardings = state_shardings(cfg, mesh)
        self._jit = jax.jit(
            train_step_fn(cfg),
            in_shardings=(shardings, batch_sharding(mesh), batch_sharding(mesh)),
            out_shardings=(shardings, repl),
            donate_argnums=0,
        )
        self.strict = cfg.strict_shapes
        self.peer_timeout_s = cfg.distributed_timeout_s
        self.compiled: dict[tuple, Any] = {}
        self.compiles = 0
        self.compile_seconds = 0.0
        # How the first compile went: "hit" (JAX's persistent cache served it), "miss" (looked
        # up, not found) or "off" (no cache dir).
        self.first_cache: str | None = None

    def _await_peers(self) -> None:
        """Every host's first step starts once all have compiled it. Compiles take unequal
        times (a cache hit on one host, a compile on another: seconds against tens of seconds,
        see docs/runtime.md; a bigger model on one host is slower),
        and a host waiting inside the step's first collective for a peer still compiling can
        time out there: CPU collectives (the emulator's hosts) give up after 30 s ("Gloo context
        initialization failed: DEADLINE_EXCEEDED"). A barrier of the distributed client waits
        up to `distributed_timeout_s` (checkpoint.py's switch makes Orbax's barriers the same)."""
        if jax.process_count() > 1:
            import orbax.checkpoint as ocp

            ocp.multihost.sync_global_processes("tpujob-first-step-compiled", timeout=self.peer_timeout_s)

    def __call__(self, state: dict, tokens: jax.Array, flags: jax.Array) -> tuple[dict, dict]:
        sig = (tokens.shape, str(tokens.dtype), flags.shape)
        fn = self.compiled.get(sig)
        if fn is None:
            if self.compiled and self.strict:
                first = next(iter(self.compiled))
                raise RecompileError(
                    f"train step would recompile: batch {first[0]} -> {sig[0]} (strict_shapes)")
            t0 = time.perf_counter()
            before = dict(CACHE_EVENTS)
            fn = self._jit.lower(state, tokens, flags).compile()
            self.compile_seconds += time.perf_counter() - t0
            if self.first_cache is None:
                self.first_cache = ("hit" if CACHE_EVENTS["hits"] > before["hits"] else
                                    "miss" if CACHE_EVENTS["lookups"] > before["lookups"] else "off")
                self._await_peers()
            self.compiled[sig] = fn
            self.compiles += 1
        return fn(state, tokens, flags)


@jax.jit
def all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves))
