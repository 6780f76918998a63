import numpy as np
import torch
import torch.nn.functional as F


def select(x, mask, max_len: int):
    n = x.shape[1]
    head = x[:, :n]
    tail = x[-max_len:]
    filled = torch.where(mask, x, torch.zeros_like(x))
    x[mask] = 0  # a masked write keeps the shape
    uniq = np.unique([1, 2, 2])
    opt = x if mask is None else x[0]
    return head, tail, filled, uniq, opt


def collate(samples, length=128):
    padded = [F.pad(s, (0, length - s.shape[0])) for s in samples]
    return torch.stack(padded)


def stack_features(samples):
    return torch.stack(samples)
