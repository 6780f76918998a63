from functools import partial

import jax
import jax.numpy as jnp


@jax.jit
def loss(x, y):
    if x.sum() > 0:  # expect: TPU011
        y = y + 1
    n = x.sum()
    head = x[:n]  # expect: TPU011
    while y > 0:  # expect: TPU011
        y = y - 1
    return head


@partial(jax.jit, static_argnums=(1,))
def scan(x, steps, scale):
    for i in range(steps):
        x = x * 2
    for j in range(scale):  # expect: TPU011
        x = x + j
    return x[x > 0]  # expect: TPU011


def plain(x, k):
    def body(v):
        return v if k > 0 else -v  # expect: TPU011
    return body(x)


plain_jit = jax.jit(plain)
