# pytorch/xla test/test_train_mp_imagenet_fsdp.py:366: the epoch loop calls train_loop_fn,
# whose batch loop iterates an MpDeviceLoader (a graph cut every step). The epoch loop
# reaches the backward and the optimizer step only through that callee's own loop, so it
# grows no graph itself.
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

FLAGS = None


def train_imagenet(model, train_loader, optimizer, device):
    def train_loop_fn(loader, epoch):
        for step, (data, target) in enumerate(loader):
            optimizer.zero_grad()
            loss = model(data, target)
            loss.backward()
            optimizer.step()

    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    for epoch in range(1, FLAGS.num_epochs + 1):
        xm.master_print(f"epoch {epoch}")
        train_loop_fn(train_device_loader, epoch)
