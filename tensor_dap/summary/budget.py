"""How much work a summary may do.

A debugger renders summaries while the user waits, so the default budget keeps any
tensor's summary bounded in time; benchmarks and reports can ask for exact stats.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional


def _env_int(name: str, default: Optional[int]) -> Optional[int]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(float(raw))
    except ValueError:
        return default
    return None if value <= 0 else value


@dataclass(frozen=True)
class Budget:
    """Element budgets for one summary.

    ``exact_elements``: mean/std/counts use every element up to this many (None: no limit).
    ``scan_elements``: above the exact budget, one cheap min/max pass still covers every
    element up to this many, so the range and NaN/Inf presence stay exact.
    ``chunk_elements``: the working-set size of one fused pass (cache-sized).
    ``max_ms``: wall-clock cap; past it the remaining chunks are skipped and the summary
    says it is sampled, so a slow or busy machine never freezes the debugger.
    """

    exact_elements: Optional[int] = 2**24
    scan_elements: Optional[int] = 2**28
    chunk_elements: int = 2**20
    max_ms: Optional[float] = 30.0

    @classmethod
    def exact(cls) -> "Budget":
        return cls(exact_elements=None, scan_elements=None, max_ms=None)

    def patient(self, max_ms: float = 1000.0) -> "Budget":
        """This budget with a longer time cap, for a command the user asked for and waits on (pdb ``nan``):
        the element budgets still bound the work, but a busy machine no longer cuts the range pass short."""
        return Budget(self.exact_elements, self.scan_elements, self.chunk_elements,
                      None if self.max_ms is None else max(self.max_ms, max_ms))

    @classmethod
    def from_env(cls) -> "Budget":
        """The default budget, overridable with TENSOR_DAP_EXACT_ELEMENTS / TENSOR_DAP_SCAN_ELEMENTS."""
        base = cls()
        return cls(
            exact_elements=_env_int("TENSOR_DAP_EXACT_ELEMENTS", base.exact_elements),
            scan_elements=_env_int("TENSOR_DAP_SCAN_ELEMENTS", base.scan_elements),
            max_ms=_env_int("TENSOR_DAP_MAX_MS", base.max_ms),
        )


DEFAULT_BUDGET = Budget.from_env()
VALUES_SHOWN = 10  # tensors this small show their values in the one-line form (no extra pass: they are tiny)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch ops on the calling thread alone, then restore the thread count.

    Summaries are memory-bound, so intra-op threads buy little, and on a busy machine (DataLoader
    workers keep running while the program sits at a breakpoint) one descheduled worker stalls every
    parallel op for a scheduler slice: tens of ms per op. Costs well under a microsecond.
    """
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 1
    if threads <= 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
