from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnames=("train",))
def forward(x, mask, train):
    if train:
        x = x * 2
    if mask is None:
        mask = jnp.ones_like(x)
    if x.shape[0] > 1 and x.ndim == 2 and len(x) > 1:
        x = x[: x.shape[0] // 2]
    return jnp.where(mask, x, 0)


def not_jitted(x):
    if x.sum() > 0:
        return x[: int(x.sum())]
    return x
