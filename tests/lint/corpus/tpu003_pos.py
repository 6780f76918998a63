import torch
import torch_xla.core.xla_model as xm


def setup(model, batch):
    model = model.cuda()  # expect: TPU003
    device = torch.device("cuda")  # expect: TPU003
    other = torch.device("cuda:1")  # expect: TPU003
    batch = batch.to("cuda")  # expect: TPU003
    buf = torch.zeros(4, device="cuda:0")  # expect: TPU003
    return model, device, other, batch, buf
