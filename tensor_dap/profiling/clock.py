"""Time marks that are right on a GPU: CUDA events on the current stream, read only when asked.

A host clock around GPU work measures how long it took to *launch* it. A CUDA event is
recorded into the stream instead and completes when the GPU gets there, so the time
between two events is the GPU's time. Reading it waits for the later event, so marks are
kept unread (``Span``) and resolved together when a report asks; completed ones are
resolved early without waiting, so an unread backlog stays bounded.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Optional

EventFactory = Callable[[], Any]  # makes an object with record(), query(), synchronize(), elapsed_time(other)


def cuda_active() -> bool:
    """True when this process uses CUDA already (never initializes it just to ask)."""
    import sys

    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install is no CUDA, for a timer
        return False


def cuda_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


class Span:
    """One measured interval: host seconds, or a pair of recorded events until it is resolved."""

    __slots__ = ("seconds", "start", "end")

    def __init__(self, seconds: Optional[float] = None, start: Any = None, end: Any = None) -> None:
        self.seconds = seconds
        self.start = start
        self.end = end

    def ready(self) -> bool:
        """Resolved, or its end event already completed (no wait)."""
        if self.seconds is not None:
            return True
        try:
            return bool(self.end.query())
        except Exception:  # noqa: BLE001 - a broken event is resolved as unknown below
            return True

    def resolve(self) -> float:
        """Seconds; waits for the end event if the GPU has not reached it yet."""
        if self.seconds is None:
            try:
                self.end.synchronize()
                self.seconds = float(self.start.elapsed_time(self.end)) / 1000.0  # ms -> s
            except Exception:  # noqa: BLE001 - never raise into the training loop
                self.seconds = float("nan")
            self.start = self.end = None
        return self.seconds


class Clock:
    """Starts and ends spans, on the host or with events from ``events`` (CUDA by default)."""

    def __init__(self, events: Optional[EventFactory] = None) -> None:
        self.events = events

    @classmethod
    def for_device(cls, device: Optional[str] = None) -> "Clock":
        """``device``: "cuda" ("cuda:N"), "cpu", or None to follow whether the process uses CUDA.

        "cuda" where CUDA is not available times on the host clock with a warning: the same script
        keeps running on a CPU machine (a smoke test, a laptop), and says its times are wall time.
        """
        if device is None:
            return cls(cuda_event if cuda_active() else None)
        kind = str(device).split(":")[0]
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"Timer device must be 'cuda', 'cpu' or None (follow the process), not {device!r}")
        if kind == "cuda" and not _cuda_available():
            warnings.warn(f"tensor_dap.Timer(device={str(device)!r}): CUDA is not available here, so this timer "
                          f"measures wall time on the host clock (time.perf_counter)", RuntimeWarning, stacklevel=3)
            return cls(None)
        return cls(cuda_event if kind == "cuda" else None)

    def start(self) -> Any:
        if self.events is None:
            return time.perf_counter()
        event = self.events()
        event.record()
        return event

    def end(self, started: Any) -> Span:
        if self.events is None:
            return Span(seconds=time.perf_counter() - started)
        event = self.events()
        event.record()
        return Span(start=started, end=event)
