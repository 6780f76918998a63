# The PyTorch reference the JAX model is tested against: never runs under TorchXLA.
import torch.nn.functional as F


def reference_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def compare(a, b):
    # A weight converter's check, eager on the CPU.
    mismatch = (a != b).nonzero()
    return a[a != b][: len(mismatch)]
