"""tensor_dap.install(post_mortem=True) from code: an uncaught broadcasting error gets the crash report."""
import torch

import tensor_dap

tensor_dap.install(post_mortem=True)
scores = torch.zeros(8, 3)
bias = torch.ones(4)
total = scores + bias
