# Membership tests look at a pytree's structure (dict keys), which is static under tracing.
import jax
import jax.numpy as jnp
from jax import jit as compile_fn


@jax.jit
def apply(params, x):
    y = x @ params["w"]
    if "bias" in params:
        y = y + params["bias"]
    if "scale" not in params:
        return y
    return y * params["scale"]


def outer(params, x):
    @compile_fn
    def inner(p, v):
        extra = p["extra"] if "extra" in p else jnp.zeros_like(v)
        return v + extra
    return inner(params, x)
