import flax.linen as nn
import torch.nn
import torch_xla  # noqa: F401
from flax import nnx


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        # 1000 pads to 1024: 2% of the tile's work, noise next to everything else.
        return nn.Dense(1000)(x)


# An input width is whatever the layer before produces (a flattened conv stack): judged
# there, not here. The output widths are the ones a modeller chooses.
flat = nnx.Linear(3136, 1024, rngs=nnx.Rngs(0))
mnist_head = torch.nn.Linear(320, 50)
