# jnp.ndim, jnp.shape, jnp.isscalar and jax.typeof read an argument's abstract type, which
# is concrete while tracing, like x.ndim or x.dtype.
import jax
import jax.numpy as jnp


@jax.jit(static_argnames=("has_weights",))
def ragged_gather(x, indices, start, end, has_weights=False):
    # AI-Hypercomputer/maxtext src/maxtext/kernels/ragged/ragged_gather.py:399
    if jnp.ndim(start) == 0:
        start = jnp.repeat(start, 2)
    elif start.shape == (1,):
        start = jnp.pad(start, (0, 1))
    if jnp.shape(end) == ():
        end = jnp.repeat(end, 2)
    return x[indices], start, end


@jax.jit
def gmm(lhs, rhs, group_offset=None):
    # maxtext kernels/megablox/pallas_mosaic_tpu_v2_gmm_kernel.py:1354
    if group_offset is None:
        group_offset = jnp.array([0], dtype=jnp.int32)
    elif jnp.isscalar(group_offset):
        group_offset = group_offset[None]
    # maxtext kernels/gather_reduce_sc.py:1607
    if jax.typeof(lhs).manual_axis_type:
        lhs = lhs.astype(jnp.float32)
    return lhs @ rhs, group_offset
