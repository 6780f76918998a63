# A JAX project (no torch_xla anywhere in the set).
import jax.numpy as jnp


def attention(q, k, v):
    return jnp.einsum("bqk,bkd->bqd", jnp.einsum("bqd,bkd->bqk", q, k), v)
