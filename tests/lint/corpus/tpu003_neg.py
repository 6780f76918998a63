import torch
import torch_xla.core.xla_model as xm


def setup(model, batch):
    device = xm.xla_device()
    model = model.to(device)
    batch = batch.to("cpu")
    picked = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return model, batch, picked, torch.cuda.is_available()
