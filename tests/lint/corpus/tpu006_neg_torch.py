import torch


def train(model, loader, optimizer, accelerator, args, is_torch_xla_available):
    state = model.state
    for step, batch in enumerate(loader):
        loss = model(batch)
        accelerator.backward(loss)  # the accelerator is no tensor
        if accelerator.state.num_processes > 1:
            state.gather()
        # On XLA `and` stops before the tensor is read.
        if not is_torch_xla_available() and torch.isnan(loss):
            continue
        if torch.cuda.is_available():
            print(loss.item())  # a CUDA-only branch
        total = loss.detach().float()  # a dtype cast on device, no sync
        optimizer.step()
        if step % args.log_every == 0:
            print(total.item())
    return total
