"""Marks a program leaves for the profilers: ``tensor_dap.step()`` and ``@tensor_dap.profile``.

Both cost next to nothing when no profile is running, so they can stay in training code.
A profiler that needs them registers a listener here for the length of its run.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

StepListener = Callable[[str], None]  # called with "explicit" (tensor_dap.step), "optimizer" or "backward"

_step_listeners: list[StepListener] = []
_line_marker: Optional[Callable[[Any], Any]] = None


def step() -> None:
    """Mark the end of one training step: ``--mode torch`` and ``--mode memory`` count steps by it.

    Without any call, a profile counts optimizer steps instead (one ``optimizer.step()`` = one step), and
    with no optimizer either, ``backward()`` calls on a loss.
    """
    for listener in tuple(_step_listeners):
        listener("explicit")


def optimizer_stepped() -> None:
    """Called after every optimizer step while a profile listens (torch's global optimizer hook)."""
    for listener in tuple(_step_listeners):
        listener("optimizer")


def backward_returned() -> None:
    """Called after every ``backward()`` on a loss while a profile listens: the steps of a loop with no optimizer."""
    for listener in tuple(_step_listeners):
        listener("backward")


def add_step_listener(listener: StepListener) -> None:
    _step_listeners.append(listener)


def remove_step_listener(listener: StepListener) -> None:
    if listener in _step_listeners:
        _step_listeners.remove(listener)


def profile(func: Any) -> Any:
    """``@tensor_dap.profile``: profile ``func`` line by line under ``--mode line``; unchanged otherwise."""
    if _line_marker is None or not callable(func):
        return func
    return _line_marker(func)


def set_line_marker(marker: Optional[Callable[[Any], Any]]) -> None:
    """The running line profile's ``add`` (None when it ends)."""
    global _line_marker
    _line_marker = marker
