"""Side-by-side timing for the benchmarks: each variant against a plain block right next to it.

A shared 2-core machine drifts by more than the few percent these benchmarks look for, so every
variant is measured in adjacent pairs with the plain loop, in alternating order, and the median of
the pair ratios is reported with its middle half (the noise, visible).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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
