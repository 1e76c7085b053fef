"""Crashes with a shape mismatch: `tensor-dap run` must name the operands of the failing line."""
import sys

import torch


def step(x, w):
    h = x * 2
    return h @ w


print("args", sys.argv[1:], flush=True)
step(torch.randn(4, 3), torch.randn(4, 5))
