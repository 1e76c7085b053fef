"""describe() vs the naive six reductions vs lovely-tensors vs one aminmax pass, side by side; the
worst cases (broadcast, unfold, quantized, nested, int64, bf16, sampled-large) in time and extra memory;
a checkpoint listing's many small tensors one by one vs together.

Run: .venv/bin/python benchmarks/bench_summary.py [--quick]
Prints median times and the ratios the foundation and hardening issues set targets for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List

import torch

from tensor_dap import Budget, describe
from tensor_dap.summary import describe_many

WORST_CASES = Path(__file__).resolve().parent.parent / "tests" / "harness" / "worst_cases.py"
BUDGET_MS = 50.0  # the default budget caps a summary at 30 ms; measured, every case must stay under this
WORKSPACE = 8 * 2**20  # two chunk buffers: the least extra memory any summary may need


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


def worst_cases(repeat: int, scale: float) -> tuple[bool, bool]:
    """Each case in a fresh process (peak memory is per process): median ms of ``repeat`` runs, the extra
    memory of the first, against the 50 ms target and 1.5x the tensor's storage."""
    rows = {}
    for _ in range(repeat):
        out = subprocess.run([sys.executable, str(WORST_CASES), str(scale)], capture_output=True, text=True,
                             check=True).stdout
        for d in map(json.loads, out.splitlines()):
            rows.setdefault(d["name"], []).append(d)
    print(f"\nworst cases, default budget (median of {repeat} fresh processes; thrifty = the debugger's budget "
          "once a Variables request has spent 250 ms):")
    print(f"  {'case':<34}{'ms':>8}{'thrifty ms':>12}{'extra MiB':>11}{'storage MiB':>13}{'extra/storage':>15}"
          f"{'hist ms':>9}{'hist MiB':>10}  line")
    time_ok = memory_ok = True
    for name, runs in rows.items():
        ms = statistics.median(r["ms"] for r in runs)
        thrifty = statistics.median(r["thrifty_ms"] for r in runs)
        extra, storage = runs[0]["extra"], runs[0]["storage"]
        hist_ms, hist_extra = statistics.median(r["hist_ms"] for r in runs), runs[0]["hist_extra"]
        time_ok &= ms <= BUDGET_MS and thrifty <= ms + 5 and hist_ms <= BUDGET_MS
        memory_ok &= extra <= max(1.5 * storage, WORKSPACE) and hist_extra <= max(1.5 * storage, WORKSPACE)
        print(f"  {name:<34}{ms:>8.1f}{thrifty:>12.1f}{extra / 2**20:>11.2f}{storage / 2**20:>13.2f}"
              f"{extra / max(storage, 1):>15.2f}{hist_ms:>9.1f}{hist_extra / 2**20:>10.2f}  {runs[0]['line'][:70]}")
    return time_ok, memory_ok


def listing(count: int, repeat: int) -> float:
    """A checkpoint of many small tensors (what `tensor-dap inspect` lists): one by one vs together."""
    tensors = [torch.randn(16, 16) for _ in range(count)]
    one = median_ms(lambda: [describe(t) for t in tensors], repeat)
    many = median_ms(lambda: describe_many(tensors), repeat)
    print(f"\n{count:,} tensors of 256 elements (a checkpoint listing):")
    print(f"  describe one by one   {one:>9.0f} ms  ({one / count:.3f} ms a tensor)")
    print(f"  describe_many         {many:>9.0f} ms  ({many / count:.3f} ms a tensor)  {one / many:.1f}× faster")
    return one / many


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
    time_ok, memory_ok = worst_cases(3, 0.25 if args.quick else 1.0)
    batched = listing(4000 if args.quick else 32000, 3)
    vs_floor = rows["describe exact"] / rows["aminmax (floor)"]
    vs_lovely = rows["lovely-tensors"] / rows["describe exact"]
    print("\ntargets:")
    print(f"  describe exact on {big:.0e} within 6× aminmax: {vs_floor:.2f}×  {'PASS' if vs_floor <= 6 else 'FAIL'}")
    print(f"  describe ≥10× faster than lovely-tensors:     {vs_lovely:.1f}×  {'PASS' if vs_lovely >= 10 else 'FAIL'}")
    print(f"  slowest default-budget summary under 50 ms:  {worst:.1f} ms  {'PASS' if worst < 50 else 'FAIL'}")
    print(f"  worst cases under {BUDGET_MS:.0f} ms, thrifty never slower:  {'PASS' if time_ok else 'FAIL'}")
    print(f"  worst cases under 1.5× storage (or {WORKSPACE >> 20} MiB):    {'PASS' if memory_ok else 'FAIL'}")
    print(f"  listing many small tensors ≥2.5× faster together: {batched:.1f}×  {'PASS' if batched >= 2.5 else 'FAIL'}")


if __name__ == "__main__":
    main()
