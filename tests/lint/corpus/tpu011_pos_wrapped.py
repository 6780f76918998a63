import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.experimental.pjit import pjit
from jax.experimental.shard_map import shard_map


def step(state, batch, config):
    if batch.sum() > 0:  # expect: TPU011
        state = state + 1
    return state


p_step = jax.jit(functools.partial(step, config=None))


class Trainer:
    def __init__(self):
        self.step = jax.jit(self.update)

    def update(self, x):
        while x > 0:  # expect: TPU011
            x = x - 1
        return x


@nnx.jit
def nnx_step(x):
    return x[: jnp.argmax(x)]  # expect: TPU011


def sharded(x):
    assert jnp.all(x > 0)  # expect: TPU011
    return x


def compile_step(fn, **options):
    """A project's own wrapper around jax.jit."""
    return jax.jit(fn, **options)


def local(x):
    if x.mean() > 1:  # expect: TPU011
        return x
    return -x


fast = compile_step(local)
s = shard_map(sharded, mesh=None, in_specs=None, out_specs=None)
pj = pjit(lambda x: x)
