import torch
import torch_xla
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import checkpoint as ckpt
from torch.utils import checkpoint


class Block(torch.nn.Module):
    def forward(self, x):
        def inner(y):
            return ckpt(self.layer, y)  # expect: TPU001
        return torch.utils.checkpoint.checkpoint(inner, x)  # expect: TPU001


def run(f, x):
    cp.checkpoint_sequential(f, 2, x)  # expect: TPU001
    return checkpoint.checkpoint(f, x)  # expect: TPU001
