import torch


def train(model, loader, optimizer):
    total = 0.0
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss}")  # expect: TPU006
        total += loss.item()  # expect: TPU006
        preds = model.logits.cpu()  # expect: TPU006
        for value in preds:
            seen = value.numpy()  # expect: TPU006
        if float(loss) > 10:  # expect: TPU006
            break


def bench(model, batches, optimizer, num_steps):
    # karpathy/nanoGPT bench.py: the sync is the .item(); printing its float is not another.
    for k in range(num_steps):
        loss = model(next(batches))
        loss.backward()
        optimizer.step()
        lossf = loss.item()  # expect: TPU006
        print(f"{k}/{num_steps} loss: {lossf:.4f}")
        scaled = float(loss) * 2  # expect: TPU006
        print(scaled)
        values = loss.detach().cpu().numpy()  # expect: TPU006
        print(values)
        doubled = loss * 2
        print(doubled)  # expect: TPU006
