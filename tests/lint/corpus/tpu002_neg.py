import torch
import torch.nn.functional as F


def attend(q, k, v, mask):
    # Explicit attention, and a feature probe by name: neither calls SDPA.
    if hasattr(F, "scaled_dot_product_attention"):
        pass
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask
    return torch.softmax(scores, dim=-1) @ v


def scaled_dot_product_attention(q, k, v):
    return attend(q, k, v, 0)


out = scaled_dot_product_attention(1, 2, 3)
