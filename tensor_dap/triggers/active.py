"""Which ``watch`` is active: ``break_if`` inside a watch hands its report to it (for a bundle and the loss history),
and a watch whose batch came from another watched model asks that one where its output went non-finite."""

from __future__ import annotations

from typing import Any

from . import warned

# Every watch still open, oldest first. The unchanged loop's capture reads its length at every backward()
# (more than one: two models training in one loop, and not every loss is every model's).
open_watches: list[Any] = []


def push(w: Any) -> None:
    open_watches.append(w)
    warned.listen(open_watches)  # its reports name the warnings given in their step


def remove(w: Any) -> None:
    if w in open_watches:
        open_watches.remove(w)
        warned.stop_listening()


def current() -> Any:
    """The most recently started watch still open, or None."""
    return open_watches[-1] if open_watches else None


def watches() -> tuple[Any, ...]:
    """Every watch still open, oldest first."""
    return tuple(open_watches)
