"""What noting a DataLoader's dataset indices costs a batch (``batch_origin``, on while any watch is open): a
DataLoader's batches plain vs followed, side by side in one run, with and without workers.

Run: .venv/bin/python benchmarks/bench_batch_origin.py [--quick]
The same loader (a TensorDataset of 64-feature rows, batches of 64, shuffled) is iterated in blocks of batches,
plain and followed in adjacent pairs (``_paired.paired_ratios``); the µs a batch each way and their ratio are
printed. What the docs claim (docs/triggers.md, phase `input`): a few µs a batch against a DataLoader's hundreds.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from tensor_dap import batch_origin
from _paired import paired_ratios, spread  # noqa: E402 - the benchmarks' shared timing, beside this script


def loader(workers: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64, generator=g), torch.randint(0, 10, (4096,), generator=g))
    return DataLoader(data, batch_size=64, shuffle=True, num_workers=workers, persistent_workers=workers > 0,
                      generator=torch.Generator().manual_seed(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = ap.parse_args()
    rounds = 3 if args.quick else 30
    print(f"torch {torch.__version__}; TensorDataset of 4096 rows × 64, batches of 64, shuffled")
    for workers in (0, 2):
        rates, ratios = paired_ratios(_variants(loader(workers)), rounds, 64, warmup=64)
        us = {name: 1e6 / statistics.median(values) for name, values in rates.items()}
        median, q1, q3 = spread(ratios["followed"])
        print(f"  {workers} workers: plain {us['plain']:.1f} µs a batch, followed {us['followed']:.1f} "
              f"({us['followed'] - us['plain']:+.1f} µs), {median:.3f}× plain (middle half {q1:.3f}–{q3:.3f})")


def _variants(batches: DataLoader) -> dict[str, Callable[[int], None]]:
    """plain and followed: ``n`` batches of ``batches``, the second while ``batch_origin`` notes their indices."""
    def plain(n: int) -> None:
        _take(batches, n)

    def followed(n: int) -> None:
        handle = batch_origin.follow()
        try:
            _take(batches, n)
        finally:
            handle.remove()

    return {"plain": plain, "followed": followed}


def _take(loader: DataLoader, n: int) -> None:
    """``n`` batches, a new epoch begun where one ends (its iterator made again, as a training loop does)."""
    taken = 0
    while taken < n:
        for _ in loader:
            taken += 1
            if taken == n:
                return


if __name__ == "__main__":
    main()
