"""Training-loop overhead of the triggers: plain vs watch vs break_if vs anomaly mode vs naive hooks.

Run: .venv/bin/python benchmarks/bench_guard.py [--quick]
The same loop (MLP 784-256-256-10, batch 64, Adam, CPU) in five variants. Each round runs
every variant for a block of steps in a rotating order, and the ratio is taken per round
against that round's plain run, so drift of the machine (other jobs, turbo) hits all
variants alike; the median over rounds is printed. Targets: watch ≥ 0.95× plain,
break_if ≥ 0.99× plain.
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

TARGETS = {"watch": 0.95, "break_if": 0.99}


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 784, generator=gen), torch.randint(0, 10, (64,), generator=gen)) for _ in range(16)]

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, optimizer, data, step


def naive_hooks(model: nn.Module) -> list:
    """What people write by hand: a host sync per module per step."""
    def check(mod, args, out):
        if torch.isnan(out).any().item():
            raise RuntimeError("NaN")

    return [m.register_forward_hook(check) for m in model.modules()]


def variants() -> dict[str, Callable[[int], None]]:
    """name -> run(n_steps); each variant owns its model so state never leaks between them."""
    out: dict[str, Callable[[int], None]] = {}

    _, _, data, step = make()

    def plain(n: int) -> None:
        for i in range(n):
            step(*data[i % len(data)])

    out["plain"] = plain

    model_w, opt_w, data_w, step_w = make()
    w = tensor_dap.watch(model_w, opt_w, on="raise", capture=False)

    def watched(n: int) -> None:
        for i in range(n):
            w.step(step_w, *data_w[i % len(data_w)])

    out["watch"] = watched

    _, _, data_b, step_b = make()

    def break_if(n: int) -> None:
        for i in range(n):
            tensor_dap.break_if(step_b(*data_b[i % len(data_b)]), above=1e6, spike=10.0, on="raise")

    out["break_if"] = break_if

    _, _, data_a, step_a = make()

    def anomaly(n: int) -> None:
        with torch.autograd.set_detect_anomaly(True):
            for i in range(n):
                step_a(*data_a[i % len(data_a)])

    out["detect_anomaly"] = anomaly

    model_h, _, data_h, step_h = make()
    naive_hooks(model_h)

    def hooks(n: int) -> None:
        for i in range(n):
            step_h(*data_h[i % len(data_h)])

    out["naive isnan hooks"] = hooks
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    args = ap.parse_args()
    rounds = args.rounds or (5 if args.quick else 60)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP 784-256-256-10, batch 64, Adam, CPU")
    runs = variants()
    names = list(runs)
    for run in runs.values():
        run(10)  # warm-up: allocator, thread pool, Adam state
    rates: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        this: dict[str, float] = {}
        for name in order:
            start = time.perf_counter()
            runs[name](args.steps)
            this[name] = args.steps / (time.perf_counter() - start)
            rates[name].append(this[name])
        for name in names:
            ratios[name].append(this[name] / this["plain"])

    print(f"\n{rounds} rounds × {args.steps} steps per variant (medians)")
    print(f"  {'variant':<20}{'steps/s':>10}{'× plain':>10}{'target':>10}")
    for name in names:
        ratio = statistics.median(ratios[name])
        target = TARGETS.get(name)
        verdict = "" if target is None else f"≥{target:.2f} {'PASS' if ratio >= target else 'FAIL'}"
        print(f"  {name:<20}{statistics.median(rates[name]):>10.1f}{ratio:>10.3f}{verdict:>16}")


if __name__ == "__main__":
    main()
