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
