import torch
from torch.utils.checkpoint import checkpoint


def forward(f, x):
    return checkpoint(f, x, use_reentrant=False)
