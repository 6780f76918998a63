import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


def train_mark_step(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        optimizer.step()
        xm.mark_step()


def train_optimizer_step(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        xm.optimizer_step(optimizer)


def train_step_context(model, loader, optimizer):
    for batch in loader:
        with torch_xla.step():
            model(batch).backward()
            optimizer.step()


def train_device_loader(model, loader, optimizer, device):
    for batch in pl.MpDeviceLoader(loader, device):
        model(batch).backward()
        optimizer.step()


def accumulate(model, loader, optimizer):
    for batch in loader:
        for micro in batch:
            model(micro).backward()
        optimizer.step()
        xm.mark_step()
