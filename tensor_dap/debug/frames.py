"""Which frames are the user's: everything outside Python, torch and tensor_dap.

A trigger fires deep inside torch's optimizer hooks and tensor_dap's own code; the user wants to
land in their training loop or model code, and a report should name their line, not ours. One
predicate serves both: the debugger hides library frames from ``where``/``up``/``down``, and
localization names the first user frame as the source line of an op.
"""

from __future__ import annotations

import linecache
import os
import sys
from types import FrameType
from typing import Any, Callable, NamedTuple, Optional

from ..libraries import is_framework


def is_library(filename: str) -> bool:
    """True for Python's, torch's and tensor_dap's own code (``libraries.is_framework``)."""
    return is_framework(filename)


def user_frame(frame: Optional[FrameType]) -> Optional[FrameType]:
    """``frame`` or the nearest caller outside torch and tensor_dap; None when every frame is library code."""
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


class SourceLine(NamedTuple):
    """A line of the user's code: where an op ran, where a step called backward."""

    file: str
    line: int
    function: str = ""

    @property
    def text(self) -> str:
        """The line itself, stripped ('' when the file cannot be read, e.g. code typed at a prompt)."""
        try:
            return linecache.getline(self.file, self.line).strip()
        except Exception:  # noqa: BLE001 - an unreadable file just has no text
            return ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


_STAND_INS: dict[Any, Callable[[FrameType], Optional[SourceLine]]] = {}


def stand_in(code: Any, line_of: Callable[[FrameType], Optional[SourceLine]]) -> None:
    """Frames running ``code`` re-run the user's code from tensor_dap: above them, the user's line is
    the one ``line_of(frame)`` recorded when that code first ran (not the hook the re-run started in)."""
    _STAND_INS[code] = line_of


def user_line(frame: Optional[FrameType] = None) -> Optional[SourceLine]:
    """The user's line that is running now (``frame`` defaults to the caller's)."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        line_of = _STAND_INS.get(f.f_code)
        if line_of is not None:
            recorded = line_of(f)
            if recorded is not None:
                return recorded
        if not is_library(f.f_code.co_filename):
            return SourceLine(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None
