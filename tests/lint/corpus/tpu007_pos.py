import torch
from torch import nonzero as nz


def select(x, lengths, scores):
    keep = x[x > 0]  # expect: TPU007
    mask = scores.isfinite()
    both = mask & (scores < 1)
    a = x[both]  # expect: TPU007
    b = x[:, ~mask]  # expect: TPU007
    idx = torch.nonzero(mask)  # expect: TPU007
    idx2 = nz(mask) + scores.unique()  # expect: TPU007 TPU007
    picked = torch.masked_select(x, mask)  # expect: TPU007
    where = torch.where(mask)  # expect: TPU007
    n = int(lengths.max())
    head = x[:n]  # expect: TPU007
    return x[: x.sum()]  # expect: TPU007

