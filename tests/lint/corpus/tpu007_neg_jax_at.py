import jax.numpy as jnp
import torch


def compare(t, reference):
    # JAX's x.at[mask].set(0) keeps x's shape, in a file that also imports torch.
    t = t.at[t != t].set(0)
    return torch.allclose(torch.from_numpy(jnp.asarray(t)), reference)
