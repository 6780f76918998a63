import flax.linen as nn

WIDTH = 4 * 128


class MLP(nn.Module):
    width: int = 1000

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(WIDTH)(x)
        x = nn.Dense(self.width)(x)  # not a constant: not judged
        return nn.Dense(features=2048)(x)
