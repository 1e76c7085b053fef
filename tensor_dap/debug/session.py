"""Where the tensor-aware debugger opens: ``set_trace`` (breakpoints) and ``post_mortem`` (crashes).

Both first ask who is watching (``tensor_dap.dap.attached``): an attached IDE gets the stop,
a person at a terminal gets ``TensorPdb``, and a batch job gets one log line and carries on,
so a breakpoint never hangs a job nobody is watching.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..dap.attached import break_into_dap, watching
from .tensor_pdb import TensorPdb

def _where(frame: Any) -> str:
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def _note(text: str, header: str | None) -> None:
    """A message for whoever reads stderr (a batch log, the IDE's debug console)."""
    from rich.text import Text

    from ..console import make_console

    console = make_console(stderr=True)
    if header:
        console.print(Text(header), soft_wrap=True)
    console.print(Text(text, style="yellow"), soft_wrap=True)  # a log line: never wrapped


def set_trace(frame: Any = None, *, header: str | None = None) -> None:
    """Open the tensor-aware debugger at ``frame`` (default: the caller), printing ``header`` first.

    With a DAP client (VS Code) attached it stops there instead; without a terminal on stdin
    it logs where it would have stopped and returns, so a batch job never hangs.
    """
    if frame is None:
        frame = sys._getframe().f_back
    who = watching()
    if who == "dap":
        if header:
            _note(f"tensor_dap: stopping in the attached debugger at {_where(frame)}", header)
        if break_into_dap(frame):
            return
        who = watching(dap=False)
    if who != "terminal":
        _note(f"tensor_dap: breakpoint at {_where(frame)} skipped: stdin is not a terminal "
              "(run in a terminal, or attach VS Code, to stop here)", header)
        return
    debugger = TensorPdb()
    if header:
        from rich.text import Text

        debugger._print(Text(header))
    debugger.set_trace(frame)


def post_mortem(tb: Any = None) -> None:
    """Post-mortem debugging of ``tb`` (a traceback or an exception; default: the one being handled)."""
    if tb is None:
        tb = sys.exc_info()[2] or getattr(sys, "last_traceback", None)
    if isinstance(tb, BaseException):
        tb = tb.__traceback__
    if tb is None:
        raise ValueError("post_mortem: no traceback given and no exception is being handled")
    who = watching()
    if who == "dap":
        return  # the IDE already shows uncaught exceptions; a second prompt would compete with it
    if who != "terminal":
        _note("tensor_dap: post-mortem skipped: stdin is not a terminal", None)
        return
    debugger = TensorPdb()
    debugger.reset()
    debugger.interaction(None, tb)
