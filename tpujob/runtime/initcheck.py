"""Check freshly initialised parameters against what the initializer promises, before step 1.

A wrong initializer (uniform where normal was meant, a missing 1/sqrt(2L), ones where zeros were
meant) trains for hours to a worse loss without any error. Statistics are cheap next to that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .model import InitRule, flatten


@dataclass(frozen=True)
class ParamStats:
    name: str
    shape: tuple[int, ...]
    rule: InitRule
    mean: float
    std: float
    max_abs: float
    problem: str | None


def param_stats(params: dict) -> dict[str, tuple[float, float, float]]:
    """(mean, std, max |x|) per parameter, computed on the devices (params may be sharded)."""
    flat = flatten(params)

    @jax.jit
    def stats(tree):
        return {k: jnp.stack([v.mean(), v.std(), jnp.abs(v).max()]) for k, v in tree.items()}

    host = jax.device_get(stats(flat))
    found: dict[str, tuple[float, float, float]] = {}
    for k, v in host.items():
        mean, std, max_abs = (float(x) for x in np.asarray(v))
        found[k] = (mean, std, max_abs)
    return found


def judge(rule: InitRule, n: int, mean: float, std: float, max_abs: float) -> str | None:
    """Why these statistics break the rule, or None. Tolerances are several sampling sigmas."""
    if rule.kind in ("ones", "zeros"):
        want = 1.0 if rule.kind == "ones" else 0.0
        if std != 0.0 or mean != want:
            return f"want constant {want:g}"
        return None
    # Sample std of n normals has relative error ~ 1/sqrt(2n); 6 sigma, and at least 5 %.
    rel = max(0.05, 6 / math.sqrt(2 * n))
    if abs(std - rule.std) > rel * rule.std:
        return f"std {std:.3g}, want {rule.std:.3g} ± {rel:.0%}"
    if abs(mean) > 6 * rule.std / math.sqrt(n) + 1e-3 * rule.std:
        return f"mean {mean:.3g}, want 0"
    # Expected max of n |normals| is ~sqrt(2 ln n) sigmas; 2 more is far in the tail.
    limit = (math.sqrt(2 * math.log(max(n, 2))) + 2) * rule.std
    if max_abs > limit:
        return f"max |x| {max_abs:.3g} > {limit:.3g}"
    return None


def check_init(params: dict, rules: dict[str, InitRule]) -> list[ParamStats]:
    """Stats of every parameter, each with its problem (None when it keeps the promise)."""
    flat = flatten(params)
    missing = sorted(set(flat) ^ set(rules))
    if missing:
        raise ValueError(f"init rules and parameters disagree on: {', '.join(missing)}")
    out = []
    for name, (mean, std, max_abs) in param_stats(params).items():
        shape = tuple(flat[name].shape)
        problem = judge(rules[name], math.prod(shape), mean, std, max_abs)
        out.append(ParamStats(name, shape, rules[name], mean, std, max_abs, problem))
    return sorted(out, key=lambda s: s.name)


def format_table(rows: list[ParamStats]) -> str:
    header = f"{'parameter':<18} {'shape':<18} {'promised':<14} {'std':>10} {'max|x|':>10}  problem"
    lines = [header]
    for r in rows:
        promised = f"N(0,{r.rule.std:.3g})" if r.rule.kind == "normal" else r.rule.kind
        lines.append(
            f"{r.name:<18} {str(r.shape):<18} {promised:<14} {r.std:>10.4g} {r.max_abs:>10.4g}"
            f"  {r.problem or 'ok'}"
        )
    return "\n".join(lines)
