# Once a numpy array becomes a device tensor (any binding), its masks are dynamic shapes again.
import numpy as np
import torch


def select(values, device):
    arr = np.asarray(values)
    t = torch.from_numpy(arr).to(device)
    kept = t[t > 0]  # expect: TPU007
    x = np.zeros(3)
    x = torch.tensor(x, device=device)
    y = torch.tensor(np.ones(3))
    y = y.to(device, non_blocking=True)
    return kept, x[x > 0], torch.nonzero(y)  # expect: TPU007 TPU007
