# Once a numpy array becomes a tensor (any binding), its masks are dynamic shapes again.
import numpy as np
import torch


def select(values):
    arr = np.asarray(values)
    t = torch.from_numpy(arr)
    kept = t[t > 0]  # expect: TPU007
    x = np.zeros(3)
    x = torch.tensor(x)
    return kept, x[x > 0]  # expect: TPU007
