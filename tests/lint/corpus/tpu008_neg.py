import torch
import torch_xla.distributed.spmd as xs


def update(cache, idx, value, mesh):
    xs.mark_sharding(cache, mesh, ("data", None))
    metrics = {}
    metrics[idx] = value
    cache[0] = value
    cache[:, :4] = value
    return torch.where(idx, value, cache), metrics
