"""describe() vs the naive six reductions vs lovely-tensors vs one aminmax pass, side by side.

Run: .venv/bin/python benchmarks/bench_summary.py [--quick]
Prints median times and the ratios the foundation issue sets targets for.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, List

import torch

from tensor_dap import Budget, describe


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: allocator, thread pool, lazy imports
    times: List[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def naive(x: torch.Tensor) -> tuple:
    """What people write by hand: six separate reductions, six host syncs."""
    return (x.min().item(), x.max().item(), x.mean().item(), x.std().item(),
            torch.isnan(x).sum().item(), torch.isinf(x).sum().item())


def lovely(x: torch.Tensor) -> str:
    import lovely_tensors

    return str(lovely_tensors.lovely(x))


def compare(numel: int, repeat: int) -> dict:
    x = torch.randn(numel)
    exact = Budget.exact()
    rows = {
        "aminmax (floor)": median_ms(lambda: torch.aminmax(x), repeat),
        "describe exact": median_ms(lambda: describe(x, budget=exact), repeat),
        "describe default": median_ms(lambda: describe(x), repeat),
        "naive 6 reductions": median_ms(lambda: naive(x), repeat),
        "lovely-tensors": median_ms(lambda: lovely(x), max(1, repeat // 2)),
    }
    floor = rows["aminmax (floor)"]
    print(f"\nfloat32, {numel:.0e} elements ({numel * 4 / 2**20:.0f} MiB)")
    print(f"  {'method':<22}{'ms':>10}{'× aminmax':>12}{'describe exact ×faster':>25}")
    for name, ms in rows.items():
        speedup = ms / rows["describe exact"]
        print(f"  {name:<22}{ms:>10.2f}{ms / floor:>12.2f}{speedup:>25.2f}")
    return rows


def debugger_budget(repeat: int, big: int) -> float:
    """The slowest default-budget summary over awkward tensors: what a debugger user waits for."""
    cases = {
        f"f32 {big:.0e}": lambda: torch.randn(big),
        f"bf16 {big:.0e}": lambda: torch.randn(big).bfloat16(),
        f"i64 {big // 2:.0e}": lambda: torch.randint(0, 1000, (big // 2,)),
        f"f32 {big:.0e} transposed": lambda: torch.randn(big // 1000, 1000).t(),
        f"f32 {big:.0e} with NaN": lambda: torch.randn(big).index_fill_(0, torch.tensor([5]), float("nan")),
        f"c64 {big // 8:.0e}": lambda: torch.randn(big // 8, dtype=torch.complex64),
    }
    worst = 0.0
    print("\ndefault (debugger) budget, per tensor:")
    for name, make in cases.items():
        ms, line = _time_one(make(), repeat)
        worst = max(worst, ms)
        print(f"  {name:<28}{ms:>9.2f} ms   {line}"[:150])
    return worst


def _time_one(x: torch.Tensor, repeat: int) -> tuple:
    return median_ms(lambda: describe(x), repeat), str(describe(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1e7 instead of 1e8 for the large case")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    big = 10**7 if args.quick else 10**8
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    compare(10**6, args.repeat * 3)
    rows = compare(big, args.repeat)
    worst = debugger_budget(args.repeat, big)
    vs_floor = rows["describe exact"] / rows["aminmax (floor)"]
    vs_lovely = rows["lovely-tensors"] / rows["describe exact"]
    print("\ntargets:")
    print(f"  describe exact on {big:.0e} within 6× aminmax: {vs_floor:.2f}×  {'PASS' if vs_floor <= 6 else 'FAIL'}")
    print(f"  describe ≥10× faster than lovely-tensors:     {vs_lovely:.1f}×  {'PASS' if vs_lovely >= 10 else 'FAIL'}")
    print(f"  slowest default-budget summary under 50 ms:  {worst:.1f} ms  {'PASS' if worst < 50 else 'FAIL'}")


if __name__ == "__main__":
    main()
