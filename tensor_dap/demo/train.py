"""The demo's training script: a small classifier on synthetic data, with a NaN planted on purpose.

At step ``BUG_STEP`` one sample of the batch is all zeros (a padding row that slipped into the
data). The first layer has no bias, so that sample's hidden row is all zeros after the ReLU,
and ``Standardize`` (a hand-written normalization without an epsilon) divides 0 by a standard
deviation of 0: the first NaN is born in the forward of ``encoder.2``, in the division below.

Run it the ways a user would::

    python -m tensor_dap run --guard tensor_dap/demo/train.py     # stops where the NaN is born
    F5 "Debug Training (tensor_dap)" on this file in VS Code         # the same, in the IDE
    python tensor_dap/demo/train.py --clean                          # no bug: trains to the end
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES, BATCH = 16, 32, 4, 32
BUG_STEP = 7  # the step whose batch holds the all-zero row


class Standardize(nn.Module):
    """Zero mean, unit variance per sample: LayerNorm written by hand, and without its epsilon."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True)
        return (x - mean) / std  # BUG: a constant row has std 0, and 0 / 0 is NaN (add an epsilon)


class DemoNet(nn.Module):
    """encoder → head, the shape most training scripts have."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = nn.Sequential(nn.Linear(FEATURES, HIDDEN, bias=False), nn.ReLU(), Standardize(),
                                     nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def batches(steps: int, *, bug: bool = True, seed: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic batches: the class is which quarter of the features carries the signal."""
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        x = torch.randn(BATCH, FEATURES, generator=g) * 0.5
        signal = (y * (FEATURES // CLASSES)).unsqueeze(1) + torch.arange(FEATURES // CLASSES)
        x[torch.arange(BATCH).unsqueeze(1), signal] += 2.0
        if bug and step == BUG_STEP:
            x[3] = 0.0  # the padding row that slipped into the data
        yield x, y


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, *, bug: bool = True,
          log: Optional[Any] = None) -> list[float]:
    """An ordinary training loop, nothing tensor_dap-specific in it; ``log(step, loss)`` if given."""
    losses = []
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(batches(steps, bug=bug)):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if log is not None:
            log(step, loss)
    return losses


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--clean", action="store_true", help="leave the zero row out: a healthy run")
    args = parser.parse_args(argv)
    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = train(model, optimizer, args.steps, bug=not args.clean)
    print(f"trained {len(losses)} steps, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
