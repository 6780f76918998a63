import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@jax.jit
def conjugate(x):
    # Type predicates read the abstract value's dtype, concrete under tracing.
    return lax.conj(x) if np.iscomplexobj(x) else x


@jax.jit
def broadcast(*args):
    shapes = [a.shape for a in args]  # shapes of traced arrays: static
    if not shapes or all(s == shapes[0] for s in shapes):
        return list(args)
    return [jnp.broadcast_to(a, shapes[0]) for a in args]


def matmul(lhs, rhs, *, block, dtype=jnp.float16):
    if block.size < 2:  # keyword-only, bound by the partial's **options: a Python value
        raise ValueError("block too small")
    return lhs @ rhs


def make(options):
    return jax.jit(functools.partial(matmul, **options))
