"""The warnings a program was given during the step a report is about, for that report.

A NaN that came in as data carries no line: ``returns.std()`` of a one-step episode is NaN, and the graph only
shows it arriving in the loss. torch said so where it happened, though ("std(): degrees of freedom is <= 0", named
at the line calling it), as numpy does of its divisions ("invalid value encountered in divide"). While a watch is
open, the warnings that pass the program's filters (so none the program silenced, and each place once, as Python
shows them) are noted with the step every open watch is in, and shown as they are; a report names those given at the
program's own lines in its step. Under ``tensor-dap run`` they are noted from the start (``BeforeTraining``): a
report of a batch that came in non-finite names those given before any watch opened too (the data standardized by a
zero std: numpy's "invalid value encountered in divide"). ``warnings.showwarning`` is wrapped, not replaced: whatever
showed warnings still does, and the wrapper only adds a note (nothing is done where no warning comes).
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..debug.frames import SourceLine
from ..libraries import is_user_file

KEPT = 32  # the latest warnings noted, at most
SHOWN = 3  # named in one report, at most
MESSAGE_CHARS = 160
_CATEGORIES = (UserWarning, RuntimeWarning)  # numerics (torch's are UserWarning, numpy's RuntimeWarning)


class Warned(NamedTuple):
    where: SourceLine
    text: str  # "UserWarning: std(): degrees of freedom is <= 0. ..."
    steps: dict[int, int]  # id(watch) -> the step that watch was in


_noted: collections.deque[Warned] = collections.deque(maxlen=KEPT)
_before: collections.deque[Warned] = collections.deque(maxlen=SHOWN)  # given while no watch was open yet
_watches: Sequence[Any] = ()
_early = False  # noting before any watch opens (``BeforeTraining``)
_current: Any = None  # the wrapper installed last


def listen(watches: Sequence[Any]) -> None:
    """Note warnings while ``watches`` (the open watches, a live list) holds any; called as one opens."""
    global _watches
    _watches = watches
    _install()


def _install() -> None:
    global _current
    show = warnings.showwarning
    if getattr(show, "_tensor_dap", False):  # ours (one a ``catch_warnings`` put back, maybe): not wrapped twice
        _current = show
    else:
        warnings.showwarning = _wrap(show)


def stop_listening() -> None:
    """Called as the last watch closes: the wrapper gives the showing back, where nothing replaced it since (one
    left inside another's notes nothing while no watch is open)."""
    if _watches or _early:
        return
    if _current is not None and warnings.showwarning is _current:
        warnings.showwarning = _current.__wrapped__
    _noted.clear()
    _before.clear()


class BeforeTraining:
    """Warnings noted from now, before any watch opens (``tensor-dap run``'s triggers); ``close`` stops that."""

    def __init__(self) -> None:
        global _early
        _early = True
        _install()

    def close(self) -> None:
        global _early
        _early = False
        stop_listening()


def notes(watch: Any, step: int, phase: str | None = None) -> list[str]:
    """Lines for a report of ``watch`` about ``step``: the warnings given at the program's lines in that step; for a
    non-finite input (``phase``), those given before training too."""
    try:
        seen: dict[tuple[SourceLine, str], None] = {}  # a step re-run (the report's) warns again: once each
        for w in _noted:
            if w.steps.get(id(watch)) == step:
                seen[(w.where, w.text)] = None
        said = [_line("in this step", where, text) for where, text in list(seen)[-SHOWN:]]
        if phase == "input":
            said += [_line("before training", w.where, w.text) for w in _before]
        return said
    except Exception:  # noqa: BLE001 - the report goes without them
        return []


def _line(when: str, where: SourceLine, text: str) -> str:
    code = where.code
    return f"warned {when} at {where}{f'  {code}' if code else ''}: {text}"


def _wrap(show: Any) -> Any:
    global _current

    def showwarning(message: Any, category: Any, filename: str, lineno: int, *args: Any, **kwargs: Any) -> Any:
        _note(message, category, filename, lineno)
        return show(message, category, filename, lineno, *args, **kwargs)

    showwarning.__wrapped__ = show  # type: ignore[attr-defined]
    showwarning._tensor_dap = True  # type: ignore[attr-defined]
    _current = showwarning
    return showwarning


def _note(message: Any, category: Any, filename: str, lineno: int) -> None:
    """Never raises: it runs wherever the program warns."""
    try:
        if not ((_watches or _early) and isinstance(category, type) and issubclass(category, _CATEGORIES)) \
                or not is_user_file(filename):  # (an installed package's own, about itself: tyro's on its Args)
            return
        steps = {id(w): step for w in _watches if isinstance(step := getattr(w, "step_count", None), int)}
        said = str(message).strip()
        text = f"{category.__name__}: {said.splitlines()[0] if said else ''}"
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS - 1] + "…"
        (_noted if _watches else _before).append(Warned(SourceLine(filename, lineno), text, steps))
    except Exception:  # noqa: BLE001 - a warning is shown whatever happens here
        pass
