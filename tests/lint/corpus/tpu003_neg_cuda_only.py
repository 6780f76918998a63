# Plain CUDA code (no torch_xla import) is not this linter's business.
import torch

model = torch.nn.Linear(4, 4).cuda()
x = torch.zeros(4, device="cuda").to("cuda")
