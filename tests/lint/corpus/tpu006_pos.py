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
