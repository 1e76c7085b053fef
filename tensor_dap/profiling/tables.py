"""Small rich building blocks the profile summaries share: a titled table and source-location text.

Strings that come from the profiled program (file names, source lines, op names) are
``rich.text.Text`` escaped with ``format.printable``, so they are never read as markup or
terminal control sequences.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ..format import printable, shown_path


def table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    """A compact table; columns named in ``right`` are numbers, aligned right."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", no_wrap=name in right)
    return t


def where(file: str, line: int | None = None, function: str | None = None, backward: bool = False) -> Text:
    """``train.py:42 step``: a location, relative to the working directory when inside it; ``(backward)`` after
    it for the time or memory of that function's backward (``backward_sites``)."""
    shown = shown_path(file)
    text = shown if line is None else f"{shown}:{line}"
    if function:
        text += f" {function}"
    return Text(printable(text + " (backward)" if backward else text))


def plain(value: Any) -> Text:
    return Text(printable(value))


def seconds(v: float) -> str:
    """A duration with a unit that keeps 3 significant digits readable."""
    if v >= 1:
        return f"{v:.3g} s"
    if v >= 1e-3:
        return f"{v * 1e3:.3g} ms"
    if v >= 1e-6 or v <= 0:
        return f"{v * 1e6:.3g} µs"
    return f"{v * 1e9:.3g} ns"  # (what is left of an import-time share, or cProfile's tiniest)
