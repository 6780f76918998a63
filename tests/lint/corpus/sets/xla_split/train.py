# The train script imports torch_xla; the model file next to it does not.
import torch_xla.core.xla_model as xm

from model import Net


def main(loader):
    model = Net().to(xm.xla_device())
    opt = model.optimizer()
    for batch in loader:
        model(batch).backward()
        opt.step()
        xm.mark_step()
