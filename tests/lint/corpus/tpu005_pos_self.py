import torch_xla.distributed.parallel_loader as pl


class Trainer:
    def __init__(self, loader, device):
        self.device_loader = pl.MpDeviceLoader(loader, device)
        self.raw = loader

    def train(self, model, optimizer):
        # `self` is not a loader handed in: self.raw is the plain DataLoader.
        for batch in self.raw:  # expect: TPU005
            model(batch).backward()
            optimizer.step()
