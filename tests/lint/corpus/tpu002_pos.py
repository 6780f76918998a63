import torch
import torch.nn.functional as F
from torch.nn import functional as nnf
from torch.nn.functional import scaled_dot_product_attention as sdpa


class AttnProcessor2_0:
    def __call__(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)  # expect: TPU002


def attend(q, k, v):
    fn = nnf.scaled_dot_product_attention  # expect: TPU002
    return sdpa(q, k, v) + torch.nn.functional.scaled_dot_product_attention(q, k, v)  # expect: TPU002 TPU002
