"""Time budgets for the Variables panel: every value within its own budget, every burst within its total.

pydevd freezes the whole debug session while a provider runs, so a frame full of huge tensors
must still answer quickly: each value gets a budget, and once a burst of renders has spent its
share, the rest of the burst gets a thrifty one (a small sample that says so).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from typing import Callable

from ..summary import DEFAULT_BUDGET, Budget
from ..summary.budget import single_threaded

class Pacer:
    """Keeps one burst of renders (a Variables request) inside a total time budget.

    Each value gets ``per_value``; once renders in the last ``window_s`` seconds have used
    ``burst_ms``, the rest of the burst gets the ``thrifty`` budget (a small sample that says so),
    so a frame full of huge tensors still answers quickly.
    """

    def __init__(self, per_value: Budget, thrifty: Budget, burst_ms: float = 250.0, window_s: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.per_value = per_value
        self.thrifty = thrifty
        self.burst_ms = burst_ms
        self.window_s = window_s
        self._clock = clock
        self._spent: collections.deque[tuple[float, float]] = collections.deque()  # (end time, seconds)

    def _recent_ms(self) -> float:
        now = self._clock()
        while self._spent and now - self._spent[0][0] > self.window_s:
            self._spent.popleft()
        return 1000 * sum(s for _, s in self._spent)

    def budget(self) -> Budget:
        return self.thrifty if self._recent_ms() >= self.burst_ms else self.per_value

    def spend(self, seconds: float) -> None:
        self._spent.append((self._clock(), seconds))

    @contextlib.contextmanager
    def paced(self) -> Iterator[Budget]:
        """One render: its budget, computed on the calling thread only, and charged to the burst."""
        start = self._clock()
        try:
            with single_threaded():
                yield self.budget()
        finally:
            self.spend(self._clock() - start)


def debugger_pacer() -> Pacer:
    """The debugger's pacing: 20 ms per value (unless TENSOR_DAP_MAX_MS says otherwise), 250 ms a burst."""
    base = DEFAULT_BUDGET
    if not os.environ.get("TENSOR_DAP_MAX_MS"):
        base = dataclasses.replace(base, max_ms=20.0)
    thrifty = Budget(exact_elements=2**16, scan_elements=2**16, chunk_elements=2**16, max_ms=2.0)
    return Pacer(base, thrifty)
