import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class Trainer:
    def __init__(self, loader, device):
        self.device_loader = pl.MpDeviceLoader(loader, device)

    def train(self, model, optimizer):
        # The loader is an attribute bound to an MpDeviceLoader: it cuts the graph.
        for batch in self.device_loader:
            model(batch).backward()
            optimizer.step()

    def train_on(self, model, optimizer, loader):
        # A loader handed in as a parameter, in a module that builds device loaders.
        for batch in loader:
            model(batch).backward()
            xm.optimizer_step(optimizer)
