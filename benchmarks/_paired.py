"""Side-by-side timing for the benchmarks: each variant against a plain block right next to it.

A shared 2-core machine drifts by more than the few percent these benchmarks look for, so every
variant is measured in adjacent pairs with the plain loop, in alternating order, and the median of
the pair ratios is reported with its middle half (the noise, visible). ``interleaved`` runs short
blocks of every variant in a shuffled order each round, set-up untimed: for overheads a variant pays
once (making a watch) that would otherwise count against every block.

``steady_heap`` runs a benchmark under a glibc heap that the process keeps: with glibc's default
(thresholds that adapt as the program frees), a training step of the benchmarks' MLP can free the
top of its heap back to the kernel and take it again in the next step, 200-900 page faults a step
(each page zeroed by the kernel). Whether a process falls into that depends on the order of its
allocations, so the plain loop ran at 0.87 ms a step in one process and 1.2-2.4 ms in the next, and
two variants in one process differed by their faults, not by their work (measured 2026-12-04).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager


def paired_ratios(runs: dict[str, Callable[[int], object]], rounds: int, steps: int, *, warmup: int = 10,
                  plain: str = "plain") -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(steps/s of every block by variant, speed ratios × plain by variant) for ``runs[name](steps)``."""
    for run in runs.values():
        run(warmup)  # allocator, thread pool, optimizer state
    rates: dict[str, list[float]] = {n: [] for n in runs}
    ratios: dict[str, list[float]] = {n: [] for n in runs if n != plain}

    def rate(name: str) -> float:
        start = time.perf_counter()
        runs[name](steps)
        value = steps / (time.perf_counter() - start)
        rates[name].append(value)
        return value

    for r in range(rounds):
        for name in ratios:
            if r % 2:
                ours, base = rate(name), rate(plain)
            else:
                base, ours = rate(plain), rate(name)
            ratios[name].append(ours / base)
    return rates, ratios


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile); one value is its own spread."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4)
    return statistics.median(values), q1, q3


def interleaved(variants: dict[str, Callable[[], AbstractContextManager[Callable[[int], object]]]], rounds: int,
                steps: int, *, warm: int = 5, seed: int = 0) -> dict[str, list[float]]:
    """Per-step seconds of every variant, round by round. A variant is a context (set up and torn down
    outside the timer: a run pays that once, not every step) that gives ``run(n)``; each round runs every
    variant once, in a shuffled order, ``warm`` untimed steps and then ``steps`` timed ones. Short blocks
    in many rounds keep each variant's time next to the others' while the machine drifts."""
    order = list(variants)
    shuffle = random.Random(seed).shuffle
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            with variants[name]() as run:
                run(warm)
                start = time.perf_counter()
                run(steps)
                times[name].append((time.perf_counter() - start) / steps)
    return times


def round_ratios(times: dict[str, list[float]], plain: str = "plain") -> dict[str, list[float]]:
    """Speed × plain of every other variant, one value per round (its plain block ran in the same round)."""
    return {name: [p / t for p, t in zip(times[plain], values)] for name, values in times.items() if name != plain}


def ratio_interval(plain: list[float], other: list[float], *, resamples: int = 2000, seed: int = 0
                   ) -> tuple[float, float]:
    """95 % interval of median(plain) / median(other), the rounds resampled with replacement (a bootstrap):
    how far the printed ratio itself could move on this machine, unlike the spread of single rounds."""
    rng = random.Random(seed)
    pairs = list(zip(plain, other))
    values = []
    for _ in range(resamples):
        drawn = rng.choices(pairs, k=len(pairs))
        values.append(statistics.median(p for p, _ in drawn) / statistics.median(o for _, o in drawn))
    values.sort()
    return values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


# glibc's heap kept by the process: no trimming, no mmap for the benchmarks' tensors (MiB-sized, not GiB)
STEADY_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
               "MALLOC_TOP_PAD_": str(16 << 20)}
SYSTEM_MALLOC = "BENCH_SYSTEM_MALLOC"  # set to 1: time under the heap as the system configures it


def _heap_kept() -> bool:
    return all(os.environ.get(k) == v for k, v in STEADY_HEAP.items())


def steady_heap() -> None:
    """Run the calling script again, same arguments, with ``STEADY_HEAP`` in its environment (glibc reads it
    at start only), unless it already has it or ``BENCH_SYSTEM_MALLOC=1`` asks for the system's heap."""
    if not sys.platform.startswith("linux") or os.environ.get(SYSTEM_MALLOC) == "1" or _heap_kept():
        return
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]],
              {**os.environ, **STEADY_HEAP})


def heap_note() -> str:
    """How this process's heap is set up, for a benchmark's header."""
    if _heap_kept():
        return "heap: kept by the process (glibc MALLOC_* set; BENCH_SYSTEM_MALLOC=1 for the default)"
    return "heap: the system's default (page faults may differ between variants and runs)"


def page_faults() -> int:
    """Minor page faults of this process so far: what a heap handed back and taken again costs."""
    import resource  # POSIX only, like the heap it watches

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
