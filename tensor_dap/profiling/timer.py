"""``tensor_dap.Timer(name)``: time a block or a function, aggregated per name; ``tensor_dap.timers.report()``.

On a process that uses CUDA, the time is the GPU's (CUDA events, see ``clock``), and nothing
synchronizes until a report or ``.elapsed`` reads it. Statistics are exact for count and
total; p50/p95 come from the last ``KEPT`` samples of each name, so memory stays bounded.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import IO, Any, Callable, Optional, TypeVar

from .clock import Clock, Span
from .tables import seconds, table

KEPT = 10_000  # samples per name kept for percentiles
PENDING = 1_000  # unread GPU spans per name before completed ones are folded in
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TimerStats:
    name: str
    count: int
    total: float  # seconds
    mean: float
    p50: float
    p95: float


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class _Series:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.samples: deque[float] = deque(maxlen=KEPT)
        self.pending: deque[Span] = deque()

    def add(self, span: Span) -> None:
        if span.seconds is not None:
            self._fold(span.seconds)
            return
        self.pending.append(span)
        if len(self.pending) > PENDING:  # fold in the ones the GPU has finished, without waiting
            while self.pending and self.pending[0].ready():
                self._fold(self.pending.popleft().resolve())

    def _fold(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.samples.append(value)

    def resolve(self) -> None:
        while self.pending:
            self._fold(self.pending.popleft().resolve())


class Timers:
    """All timers of the process, by name (``tensor_dap.timers``)."""

    def __init__(self) -> None:
        self._series: dict[str, _Series] = {}
        self._lock = threading.Lock()

    def add(self, name: str, span: Span) -> None:
        with self._lock:
            self._series.setdefault(name, _Series()).add(span)

    def stats(self) -> dict[str, TimerStats]:
        """Per-name statistics (waits for outstanding GPU work of timed spans)."""
        with self._lock:
            out = {}
            for name, s in self._series.items():
                s.resolve()
                ordered = sorted(s.samples)
                out[name] = TimerStats(name, s.count, s.total, s.total / s.count if s.count else math.nan,
                                       _percentile(ordered, 0.5), _percentile(ordered, 0.95))
            return out

    def reset(self) -> None:
        with self._lock:
            self._series.clear()

    def table(self) -> Any:
        t = table("timers", "name", "count", "total", "mean", "p50", "p95",
                  right=("count", "total", "mean", "p50", "p95"))
        for s in sorted(self.stats().values(), key=lambda s: -s.total):
            t.add_row(s.name, str(s.count), seconds(s.total), seconds(s.mean), seconds(s.p50), seconds(s.p95))
        return t

    def report(self, file: Optional[IO[str]] = None) -> None:
        """Print the table of every timer (to stdout, or ``file``)."""
        from ..console import make_console

        make_console(file).print(self.table())


timers = Timers()


class Timer:
    """``with Timer("forward"):`` or ``@Timer("forward")``: time it, aggregated under the name.

    ``device``: "cuda" for CUDA events, "cpu" for the host clock, None (default) for CUDA events
    when the process already uses CUDA. "cuda" without CUDA falls back to the host clock with a
    RuntimeWarning; any other device is a ValueError.
    """

    def __init__(self, name: str, *, device: Optional[str] = None, registry: Optional[Timers] = None,
                 clock: Optional[Clock] = None) -> None:
        self.name = name
        self.registry = registry if registry is not None else timers
        self._clock = clock if clock is not None else Clock.for_device(device)
        self._starts: list[Any] = []  # a stack, so one Timer can be re-entered
        self._last: Optional[Span] = None

    def __enter__(self) -> "Timer":
        self._starts.append(self._clock.start())
        return self

    def __exit__(self, *exc: Any) -> None:
        span = self._clock.end(self._starts.pop())
        self._last = span
        self.registry.add(self.name, span)

    def __call__(self, func: F) -> F:
        clock, registry, name = self._clock, self.registry, self.name

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock.start()
            try:
                return func(*args, **kwargs)
            finally:
                registry.add(name, clock.end(started))

        return timed  # type: ignore[return-value]

    @property
    def elapsed(self) -> float:
        """Seconds of the last completed ``with`` block (waits for its GPU work)."""
        return self._last.resolve() if self._last is not None else math.nan
