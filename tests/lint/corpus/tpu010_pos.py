import functools

import jax
from jax import pmap as parallel_map


@jax.pmap  # expect: TPU010
def step(x):
    return x * 2


@functools.partial(jax.pmap, axis_name="i")  # expect: TPU010
def reduce(x):
    return jax.lax.psum(x, "i")


fast = parallel_map(lambda x: x)  # expect: TPU010
