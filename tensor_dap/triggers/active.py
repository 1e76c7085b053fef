"""Which ``watch`` is active: ``break_if`` inside a watch hands its report to it (for a bundle and the loss history),
and a watch whose batch came from another watched model asks that one where its output went non-finite."""

from __future__ import annotations

from typing import Any

_active: list[Any] = []


def push(w: Any) -> None:
    _active.append(w)


def remove(w: Any) -> None:
    if w in _active:
        _active.remove(w)


def current() -> Any:
    """The most recently started watch still open, or None."""
    return _active[-1] if _active else None


def watches() -> tuple[Any, ...]:
    """Every watch still open, oldest first."""
    return tuple(_active)


def several() -> bool:
    """More than one watch is open (two models training in one loop: not every loss is every model's)."""
    return len(_active) > 1
