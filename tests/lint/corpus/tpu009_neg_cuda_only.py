from torch import nn

nn.init.xavier_uniform_(nn.Linear(4, 4).weight)
