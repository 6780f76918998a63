import torch


def train(model, loader, optimizer, log_every=100):
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if step % log_every == 0:
            print(f"step {step} loss {loss.item()}")
        print(f"step {step}")


def evaluate(model, loader):
    # No backward or step: an evaluation loop, syncs are expected.
    return [model(batch).item() for batch in loader]


def epochs(model, loader, optimizer):
    for epoch in range(3):
        for batch in loader:
            model(batch).backward()
            optimizer.step()
        print("epoch", epoch, model.weight.sum().item())
