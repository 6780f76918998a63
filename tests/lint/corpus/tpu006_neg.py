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


def sample(unet, scheduler, latents, timesteps):
    # A sampler's step is not an optimizer step: this is inference.
    for t in timesteps:
        latents = scheduler.step(unet(latents, t), t, latents)
        print(t.item())
    return latents


def train_tokens(model, optimizer, ids):
    for token in ids.tolist():  # the iterable is evaluated once, before the loop
        model(token).backward()
        optimizer.step()


def train_epoch(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        optimizer.step()


def main(model, loader, optimizer, epochs):
    # pytorch/examples vae/main.py: the epoch loop calls a function that loops over the
    # batches; a sync in the epoch loop happens once an epoch, not every step.
    for epoch in range(epochs):
        train_epoch(model, loader, optimizer)
        sample = model.decode(torch.randn(64, 20)).cpu()
        print(epoch, sample.sum().item())
