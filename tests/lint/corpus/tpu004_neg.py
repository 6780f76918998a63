import torch
from torch.nn.parallel import DistributedDataParallel as DDP
import torch_xla.distributed.xla_multiprocessing as xmp

model = DDP  # a reference, not a call


def main(index):
    pass


xmp.spawn(main)
