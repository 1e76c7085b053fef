"""The values a failing line names, read from its frame: what a crash report's advice points at.

Names and dotted instance attributes (``args.lr``, ``self.mask``) are read from the frame's locals, then its
globals; an attribute only from the object's own ``__dict__``, so no property's code runs (the shape explanation
re-evaluates sub-expressions under stricter rules: ``probe.shape_errors``).
"""

from __future__ import annotations

import linecache
import re
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def failing_line(frame: Any, lineno: int) -> str:
    """The source of line ``lineno`` of ``frame``'s file, stripped ('' where it cannot be read)."""
    return linecache.getline(frame.f_code.co_filename, lineno).strip() if frame is not None else ""


def named_values(frame: Any, line: str) -> list[tuple[str, Any]]:
    """(name, value) of each name on ``line`` that ``frame`` holds, in the line's order, each once."""
    found = []
    for name in dict.fromkeys(_NAME.findall(line)):
        value = _lookup(frame, name)
        if value is not None:
            found.append((name, value))
    return found


def _lookup(frame: Any, dotted: str) -> Any:
    head, *rest = dotted.split(".")
    value = frame.f_locals.get(head, frame.f_globals.get(head))
    for attr in rest:  # an instance's own attributes only: no property's code runs
        value = getattr(value, "__dict__", {}).get(attr)
    return value
