"""A crash deep inside torch, with a broadcast mask and unfold patches in the failing frame: for test_crash_run.py."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(width, width), nn.Sequential(nn.ReLU(), nn.Linear(width + 1, 2)))

    def forward(self, x):
        mask = torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048)
        patches = torch.randn(1, 3, 224, 224).unfold(2, 16, 1).unfold(3, 16, 1)
        return self.inner(x) * mask.sum() + patches.mean()  # CRASH


def step(model, x):
    return model(x)


step(nn.Sequential(Block(8)), torch.randn(4, 8))
