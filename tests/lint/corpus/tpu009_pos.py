import torch
import torch_xla
from torch import nn
from torch.nn import init


class Model(nn.Module):
    def reset(self):
        nn.init.xavier_uniform_(self.proj.weight)  # expect: TPU009
        init.trunc_normal_(self.emb.weight, std=0.02)  # expect: TPU009
        torch.nn.init.kaiming_normal_(self.out.weight)  # expect: TPU009
