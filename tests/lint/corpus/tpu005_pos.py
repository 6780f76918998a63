import torch
import torch_xla


def train(model, loader, optimizer):
    for epoch in range(3):
        for batch in loader:  # expect: TPU005
            loss = model(batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


class Trainer:
    def step(self, batch):
        self.model(batch).backward()
        self.optimizer.step()

    def fit(self, loader):
        while True:  # expect: TPU005
            self.step(next(loader))


def train_epoch(model, loader, optimizer):
    for batch in loader:  # expect: TPU005
        model(batch).backward()
        optimizer.step()


def main(model, loader, optimizer):
    # The batch loop in train_epoch is the one that never cuts the graph; the epoch loop
    # calling it is not reported again (pytorch/xla test_train_mp_imagenet_fsdp.py:366).
    for epoch in range(3):
        train_epoch(model, loader, optimizer)
