import torch
import torch_xla
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model):
    if isinstance(model, DDP):
        return model
    return DDP(model, gradient_as_bucket_view=True)  # expect: TPU004


def wrap2(model):
    return torch.nn.parallel.DistributedDataParallel(model)  # expect: TPU004
