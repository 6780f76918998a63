import torch
import torch_xla.core.xla_model as xm


def device_for(args, is_torch_xla_available):
    if torch.cuda.is_available():
        return torch.device("cuda")
    if not is_torch_xla_available():
        return torch.device("cuda:0")
    if is_torch_xla_available():
        return xm.xla_device()
    else:
        return torch.device("cuda")


def move(model, args):
    if args.device == "cuda" and args.half:
        model = model.cuda().half()
    return model
