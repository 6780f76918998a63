# Device strings kept in a name, a module constant or an f-string are still CUDA.
import torch
import torch_xla as tx

DEVICE = "cuda"


def setup(model, batch, rank):
    device = "cuda"
    model.to(device)  # expect: TPU003
    local = f"cuda:{rank}"
    batch = batch.to(local)  # expect: TPU003
    buf = torch.zeros(4, device=f"cuda:{rank}")  # expect: TPU003
    dev = torch.device(device)  # expect: TPU003

    def inner(x):
        return x.to(DEVICE)  # expect: TPU003

    return model, batch, buf, dev, inner, tx


def again(t):
    target = torch.device("cuda:0")  # expect: TPU003
    return t.to(target)  # expect: TPU003
