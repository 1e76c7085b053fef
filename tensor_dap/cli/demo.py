"""``tensor-dap demo``: a tour of the summary on the tensors that bite in training."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exact", action="store_true", help="exact stats for every tensor (no sampling)")


def zoo() -> list:
    """Named example tensors, including the ones that signal a bug."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(784, 256)
    layer(torch.randn(64, 784)).sum().backward()
    logits = torch.randn(4, 10)
    logits[1, 3] = float("nan")
    logits[2, 0] = float("inf")
    return [
        ("batch", torch.randn(32, 784)),
        ("labels", torch.randint(0, 10, (32,))),
        ("step", torch.tensor(7)),
        ("weight", layer.weight),
        ("weight.grad", layer.weight.grad),
        ("logits (NaN/Inf planted)", logits),
        ("mask", torch.rand(5) > 0.5),
        ("half", torch.randn(3, 4).half()),
        ("transposed", torch.randn(64, 32).t()),
        ("spectrum", torch.fft.rfft(torch.randn(8))),
        ("sparse", torch.eye(5).to_sparse()),
        ("empty", torch.empty(0, 3)),
        ("meta", torch.empty(1024, 1024, device="meta")),
        ("dead relu", torch.zeros(128)),
        ("big (1e7)", torch.randn(10_000_000)),
    ]


def run(args: argparse.Namespace) -> int:
    from ..console import make_console
    from ..summary import Budget, describe
    from ..summary.tables import summaries_table

    budget = Budget.exact() if args.exact else None
    rows = [(name, describe(x, budget=budget)) for name, x in zoo()]
    make_console().print(summaries_table(rows, title="tensor_dap.describe()"))
    return 0
