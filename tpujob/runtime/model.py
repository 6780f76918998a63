"""Decoder-only transformer (GPT-2 shape): fp32 master weights, bf16 compute, manual attention.

Layers are stacked on a leading axis and run with `lax.scan`, so compile time does not grow
with depth. Attention is written out (einsum, mask, softmax) rather than a fused SDPA kernel:
it lowers to plain XLA on every backend and its shapes stay static.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .config import ModelConfig

COMPUTE_DTYPE = jnp.bfloat16
# Parameters that AdamW decays: matrices, not norms or biases.
DECAYED = frozenset({"wte", "wpe", "wqkv", "wo", "w1", "w2"})


@dataclass(frozen=True)
class InitRule:
    """What the initializer promises for one tensor: N(0, std), or a constant."""

    kind: str  # "normal" | "ones" | "zeros"
    std: float = 0.0


def init_rules(cfg: ModelConfig) -> dict[str, InitRule]:
    """The promise the init check holds `init_params` to (GPT-2: residual projections scaled)."""
    resid = cfg.init_std / math.sqrt(2 * cfg.n_layer)
    normal, scaled = InitRule("normal", cfg.init_std), InitRule("normal", resid)
    return {
        "wte": normal, "wpe": normal,
        "blocks.wqkv": normal, "blocks.wo": scaled, "blocks.w1": normal, "blocks.w2": scaled,
        "blocks.ln1_scale": InitRule("ones"), "blocks.ln1_bias": InitRule("zeros"),
        "blocks.ln2_scale": InitRule("ones"), "blocks.ln2_bias": InitRule("zeros"),
        "lnf_scale": InitRule("ones"), "lnf_bias": InitRule("zeros"),
    }


def param_shapes(cfg: ModelConfig, seq_len: int) -> dict[str, tuple[int, ...]]:
    L, D, F, V = cfg.n_layer, cfg.d_model, cfg.d_ff, cfg.vocab_size
    return {
        "wte": (V, D), "wpe": (seq_len, D),
        "blocks.wqkv": (L, D, 3 * D), "blocks.wo": (L, D, D),
        "blocks.w1": (L, D, F), "blocks.w2": (L, F, D),
        "blocks.ln1_scale": (L, D), "blocks.ln1_bias": (L, D),
        "blocks.ln2_scale": (L, D), "blocks.ln2_bias": (L, D),
        "lnf_scale": (D,), "lnf_bias": (D,),
    }


def init_params(cfg: ModelConfig, seq_len: int, key: jax.Array, bad: bool = False) -> dict:
    """fp32 parameters. `bad` swaps one initializer for a wrong one, to drill the init check."""
    shapes = param_shapes(cfg, seq_len)
    resid = cfg.init_std / math.sqrt(2 * cfg.n_layer)
    keys = iter(jax.random.split(key, len(shapes)))
    flat: dict[str, jax.Array] = {}
    for name, shape in shapes.items():
        k = next(keys)
        if name.endswith("_scale"):
            flat[name] = jnp.ones(shape, jnp.float32)
        elif name.endswith("_bias"):
            flat[name] = jnp.zeros(shape, jnp.float32)
        else:
            std = resid if name in ("blocks.wo", "blocks.w2") else cfg.init_std
            flat[name] = std * jax.random.normal(k, shape, jnp.float32)
    if bad:
        # A classic: uniform [0, 1) where N(0, 0.02) was meant.
        flat["blocks.w1"] = jax.random.uniform(jax.random.fold_in(key, 1), shapes["blocks.w1"])
    return unflatten(flat)


def unflatten(flat: dict[str, jax.Array]) -> dict:
    tree: dict = {}
    for name, value in flat.items():
        node = tree
        *parents, leaf = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def flatten(tree: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    # Statistics in fp32: bf16 variance of a 1024-wide row loses most of its digits.
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + 1e-5)
    return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _block(cfg: ModelConfig, x: jax.Array, p: dict) -> jax.Array:
    B, T, D = x.shape
    H, Dh = cfg.n_head, cfg.head_dim
    h = _layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
    q, k, v = (t.reshape(B, T, H, Dh) for t in (q, k, v))
    scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) / math.sqrt(Dh)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    att = jnp.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, D)
    x = x + att @ p["wo"]
    h = _layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def logits_fn(cfg: ModelConfig, params: dict, tokens: jax.Array) -> jax.Array:
    p = jax.tree.map(lambda a: a.astype(COMPUTE_DTYPE), params)
    T = tokens.shape[1]
    x = p["wte"][tokens] + p["wpe"][:T]

    def step(x, layer):
        return _block(cfg, x, layer), None

    x, _ = jax.lax.scan(step, x, p["blocks"])
    x = _layer_norm(x, p["lnf_scale"], p["lnf_bias"])
    return (x @ p["wte"].T).astype(jnp.float32)  # tied embedding head


def loss_fn(cfg: ModelConfig, params: dict, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    logits = logits_fn(cfg, params, inputs)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token (PaLM appendix B): 6 N + 12 L D T, N counting the tied head."""
    L, D, F, V = cfg.n_layer, cfg.d_model, cfg.d_ff, cfg.vocab_size
    matmul_params = L * (3 * D * D + D * D + 2 * D * F) + V * D
    return 6.0 * matmul_params + 12.0 * L * D * seq_len


def param_count(cfg: ModelConfig, seq_len: int) -> int:
    return sum(math.prod(s) for s in param_shapes(cfg, seq_len).values())


def misaligned_dims(cfg: ModelConfig, multiple: int) -> list[str]:
    """Dims that are not multiples of the MXU tile: they pad and waste the systolic array."""
    dims = {"d_model": cfg.d_model, "d_ff": cfg.d_ff, "vocab_size": cfg.vocab_size}
    return [f"{k}={v}" for k, v in dims.items() if v % multiple]
