# Tensors made by torch ops, views of them, annotated parameters, closures and buffers.
import torch
from torch_xla.distributed import spmd


def update(x, idx, mesh, lengths: torch.Tensor):
    buf = torch.zeros(8, 8)
    spmd.mark_sharding(buf, mesh, ("data", None))
    buf[idx] = 1.0  # expect: TPU008
    view = buf.view(4, 16)
    view[:, idx] = 0  # expect: TPU008
    lengths[idx] += 1  # expect: TPU008

    def inner(i):
        buf[i] = 2.0  # expect: TPU008

    inner(idx)
    return buf


class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(4, 4))

    def write(self, pos, k):
        self.keys[pos] = k  # expect: TPU008
