import flax.linen as nn
from flax import nnx

HIDDEN = 520


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(HIDDEN)(x)  # expect: TPU012
        x = nn.Dense(features=3 * 100)(x)  # expect: TPU012
        x = nn.Dense(200)(x)  # expect: TPU012
        x = nn.Dense(128)(x)
        return nn.Dense(1024)(x)


layer = nnx.Linear(3000, 400, rngs=nnx.Rngs(0))  # expect: TPU012
