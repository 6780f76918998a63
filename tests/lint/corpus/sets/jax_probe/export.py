# Exports weights to PyTorch on a GPU box: plain PyTorch, no XLA rule applies.
import torch
import torch.nn as nn


def export(weights):
    layer = nn.Linear(512, 300)
    nn.init.normal_(layer.weight)
    return layer.cuda()
