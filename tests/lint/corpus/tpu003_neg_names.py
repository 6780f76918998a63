# Names that are not always CUDA: parameters, rebinding, shadowing, other strings.
import torch
import torch_xla.core.xla_model as xm

DEVICE = "cuda"


def setup(model, batch, device="cuda"):  # a parameter: the caller decides
    model.to(device)
    target = "cuda"
    if not torch.cuda.is_available():
        target = xm.xla_device()  # only sometimes CUDA: not reported
    batch = batch.to(target)
    label = f"device cuda:{0}"
    graph = f"cudagraph{1}"
    x = torch.zeros(2, device=f"{label}")
    return model, batch, graph, x


def shadow(model):
    DEVICE = xm.xla_device()  # the local name shadows the module constant

    def inner(m):
        return m.to(DEVICE)

    return inner(model)
