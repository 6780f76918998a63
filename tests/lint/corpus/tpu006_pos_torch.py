import torch


def get_grad_norm(params):
    total = 0.0
    for p in params:
        if p.grad is not None:  # structural: not a logging guard
            total += p.grad.norm(2).item() ** 2  # expect: TPU006
    return total ** 0.5


def train(model, loader, optimizer, accelerator, args):
    for step, batch in enumerate(loader):
        loss = model(batch)
        accelerator.backward(loss)
        if torch.isnan(loss):  # expect: TPU006
            continue
        if (step + 1) % args.accumulation == 0:  # this branch is the optimizer step
            norm = get_grad_norm(model.parameters())
            optimizer.step()
            optimizer.zero_grad()
        if args.count_tokens:  # a config flag: true every step or never
            seen = batch.sum().cpu().item()  # expect: TPU006
    return norm, seen
