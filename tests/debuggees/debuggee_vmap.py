"""Stopped inside torch.func transforms: a per-sample function under vmap(grad(...))."""
import torch
from torch.func import grad, vmap


def per_sample(w, x):
    y = (w * x).tanh()
    return y.sum()  # BP-inside


grads = vmap(grad(per_sample), in_dims=(None, 0))(torch.arange(4.0), torch.arange(12.0).reshape(3, 4) / 10)
print(grads.shape)  # BP-after
