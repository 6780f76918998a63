# Linted alone this is plain PyTorch; linted with train.py it is torch_xla code.
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint as ckpt


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(512, 300)  # expect: TPU012
        nn.init.normal_(self.proj.weight)  # expect: TPU009

    def forward(self, x):
        def block(v):
            return ckpt(self.proj, v.cuda())  # expect: TPU001 TPU003
        return block(x)

    def optimizer(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
