import torch, tensor_dap
from torch import nn
m = nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1)
with tensor_dap.watch(m, opt):
    y = torch.sigmoid(m(torch.randn(2, 4)))
    y.add_(1)   # in place on an activation sigmoid saved
    y.sum().backward()
