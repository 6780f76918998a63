import torch
import torch_xla


def update(cache, idx, value):
    cache[idx] = value
    return cache
