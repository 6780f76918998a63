import torch
import torch_xla
import torch.nn.functional as F


def f(q, k, v, model):
    model.cuda()  # tpujob: ignore[TPU003]
    model.cuda()  # tpujob: ignore[TPU006, TPU007]  # expect: TPU003
    text = "# tpujob: ignore[TPU002]"
    return F.scaled_dot_product_attention(q, k, v)  # tpujob: ignore[tpu002,TPU003]
