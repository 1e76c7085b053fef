"""Debuggee for tests/dap/test_dap_bounded.py: a frame that used to freeze the Variables panel.

A 20,000-entry ParameterList, a model of 10,000 submodules, a dict batch of 50,000 tensors,
attention masks broadcast to 2^31 elements, unfold patches, a list of (x, y) batches, an AMP
grad scaler and a generator.
"""

import torch
from torch import nn


def frame() -> None:
    torch.manual_seed(0)
    plist = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(20_000)])
    wide = nn.Sequential(*[nn.Linear(2, 2) for _ in range(10_000)])
    huge_batch = {f"x{i}": torch.full((3,), float(i)) for i in range(50_000)}
    masks = [torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048) for _ in range(4)]
    mask = masks[0]
    patches = torch.randn(1, 3, 224, 224).unfold(2, 16, 1).unfold(3, 16, 1)
    batches = [(torch.randn(32, 784), torch.randint(0, 10, (32,))) for _ in range(100)]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=50)
    gen = torch.Generator().manual_seed(1234)
    acts = [torch.randn(64, 512) for _ in range(16)]
    print("ready", len(plist), len(wide), len(huge_batch), mask.shape, patches.shape, len(batches), flush=True)  # BP
    del scaler, gen, acts


if __name__ == "__main__":
    frame()
