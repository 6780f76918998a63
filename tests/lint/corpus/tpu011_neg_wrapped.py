import functools

import jax
import jax.numpy as jnp


def pad_for_flash(x, block):
    length = x.shape[2]
    return jnp.pad(x, ((0, 0), (0, 0), (0, block - length % block), (0, 0))), length


def attention(q, config, use_hooks=False):
    # config is bound by the partial below: a Python value. use_hooks defaults to a
    # constant: callers that leave it out pass no tracer.
    if config.causal:
        q = q * 2
    if use_hooks:
        q = q + 1
    padded, length = pad_for_flash(q, 128)  # another function's result: not known traced
    q = q.at[q > 0].set(0)  # a masked update keeps the shape
    if q.dtype == jnp.bfloat16:
        q = q.astype(jnp.float32)
    return padded[:, :, :length]


attend = jax.jit(functools.partial(attention, config=None))


def branch_on_optional(state, batch):
    if state.dynamic_scale:  # an optional part of the pytree: static structure
        batch = batch * 2
    return batch


jitted = jax.jit(branch_on_optional)
