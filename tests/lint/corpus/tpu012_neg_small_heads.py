# Widths below one MXU tile (128) are set by the task (a scalar value head, class logits).
import flax.linen as nn
from flax import nnx as nx

NUM_CLASSES = 10


class Head(nn.Module):
    @nn.compact
    def __call__(self, x):
        value = nn.Dense(1)(x)
        logits = nn.Dense(features=NUM_CLASSES)(x)
        return value, logits


def build(rngs):
    def inner():
        return nx.Linear(3, 64, rngs=rngs)
    return inner()
