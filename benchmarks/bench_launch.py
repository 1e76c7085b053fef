"""What ``tensor-dap run``'s options cost a training loop: plain vs watch by hand vs --guard vs --loss-above vs
--hang-after.

Run: .venv/bin/python benchmarks/bench_launch.py [--quick]
The loop (MLP 784-256-256-10, batch 64, Adam, CPU) is the one of bench_guard.py, unchanged: no
``w.step``. ``watch`` is ``with tensor_dap.watch(model, optimizer)`` around it, written by hand;
``--guard`` finds model and optimizer by itself (``AutoTriggers(nan=True)``, a fresh one per
block, so each block also pays for finding them); ``--loss-above`` reads every loss at
``.backward()``; ``--hang-after`` is the watchdog's per-step hook. Each block is timed next to a
plain block (alternating order) and the median of those pair ratios is printed; on a shared
machine their noise is larger than the effects, so what each option's own code adds to a step
is also timed alone, against the plain step. Target: each adds under 1 % of a step (--guard's
cost beyond that is watch's own, see bench_guard.py). The numerics are checked bit-identical
with all options on.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.dist import LaunchRank
from tensor_dap.triggers.auto import AutoTriggers
from tensor_dap.triggers.hang import watchdog
from _paired import heap_note, paired_ratios, spread, steady_heap  # noqa: E402 - the benchmarks' shared timing, beside this script


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 784, generator=gen), torch.randint(0, 10, (64,), generator=gen)) for _ in range(16)]

    def loop(n: int) -> None:
        for i in range(n):
            x, y = data[i % len(data)]
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    return model, optimizer, loop


def variants() -> dict[str, Callable[[int], None]]:
    model, optimizer, loop = make()

    def watched(n: int) -> None:
        with tensor_dap.watch(model, optimizer, on="raise", capture=False):
            loop(n)

    def guard(n: int) -> None:
        with AutoTriggers(nan=True, on="raise"):
            loop(n)

    def loss_above(n: int) -> None:
        with AutoTriggers(loss_above=1e9, on="raise"):
            loop(n)

    def hang(n: int) -> None:
        with watchdog(600, rank=LaunchRank()):
            loop(n)

    return {"plain": loop, "watch by hand": watched, "--guard": guard, "--loss-above": loss_above,
            "--hang-after": hang}


def per_step_costs(n: int = 20000) -> dict[str, float]:
    """µs that each option's own code adds to one step, called directly (no training step around it)."""
    loss = torch.tensor(1.0, requires_grad=True) * 2
    out = {}
    with watchdog(600, rank=LaunchRank()) as dog:
        out["--hang-after (step hook)"] = _us(dog.beat, n)
    with AutoTriggers(nan=True, on="raise") as auto:
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()  # after the first step a watch is attached: NaN checks are its job, the loss is not read
        assert auto.watches
        out["--guard (.backward() wrapper, loss not read)"] = _us(lambda: auto._check_loss(loss), n)
    with AutoTriggers(loss_above=1e9, on="raise") as auto:
        out["--loss-above (loss read and compared)"] = _us(lambda: auto._check_loss(loss), n)
    return out


def _us(fn: Callable[[], None], n: int) -> float:
    for _ in range(n // 10):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def identical(steps: int = 30) -> bool:
    """The parameters after ``steps`` steps, plain and with --guard --loss-above --hang-after on, bit for bit."""
    model, _, loop = make()
    loop(steps)
    plain = [p.detach().clone() for p in model.parameters()]
    model, _, loop = make()
    with AutoTriggers(nan=True, loss_above=1e9, on="raise"), watchdog(600, rank=LaunchRank()):
        loop(steps)
    return all(torch.equal(a, b) for a, b in zip(plain, model.parameters()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=50, help="steps per block")
    args = ap.parse_args()
    steady_heap()
    rounds = args.rounds or (2 if args.quick else 8)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP 784-256-256-10, batch 64, Adam, CPU; "
          f"{heap_note()}")
    rates, ratios = paired_ratios(variants(), rounds, args.steps)

    print(f"\n{rounds} rounds × {args.steps} steps per block (medians of adjacent-pair ratios)")
    print(f"  {'variant':<16}{'steps/s':>10}{'× plain':>10}{'middle half':>16}")
    print(f"  {'plain':<16}{statistics.median(rates['plain']):>10.1f}{1.0:>10.3f}")
    medians = {}
    for name, values in ratios.items():
        medians[name], q1, q3 = spread(values)
        print(f"  {name:<16}{statistics.median(rates[name]):>10.1f}{medians[name]:>10.3f}{f'{q1:.3f}–{q3:.3f}':>16}")
    # Pair ratios cannot resolve a few percent where the machine's noise is larger (a shared CPU);
    # what each option adds to a step is also timed on its own, against the plain step time.
    step_us = 1e6 / statistics.median(rates["plain"])
    for name, us in per_step_costs().items():
        share = step_us / (step_us + us)
        print(f"  {name}: {us:.2f} µs per step = {share:.4f}× a plain step of {step_us:.0f} µs "
              f"(target ≥ 0.99: {'PASS' if share >= 0.99 else 'FAIL'})")
    print(f"  --guard / watch by hand, pair ratios: {medians['--guard'] / medians['watch by hand']:.3f}")
    print(f"  numerics with every option on: {'bit-identical' if identical() else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
