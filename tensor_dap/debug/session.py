"""Where the tensor-aware debugger opens: ``set_trace`` (breakpoints) and ``post_mortem`` (crashes).

Both first ask who is watching (``tensor_dap.dap.attached``): an attached IDE gets the stop,
a person at a terminal gets ``TensorPdb``, and a batch job gets one log line and carries on,
so a breakpoint never hangs a job nobody is watching.
"""

from __future__ import annotations

import bdb
import os
import sys
from typing import Any

from ..dap.attached import break_into_dap, watching
from .frames import is_library, is_runner
from .tensor_pdb import TensorPdb

def _where(frame: Any) -> str:
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def _note(text: str, header: str | None) -> None:
    """A message for whoever reads stderr (a batch log, the IDE's debug console)."""
    from rich.text import Text

    from ..console import say

    if header:
        say(Text(header), soft_wrap=True)
    say(Text(text, style="yellow"), soft_wrap=True)  # a log line: never wrapped


def set_trace(frame: Any = None, *, header: str | None = None, hide_library: bool = False) -> None:
    """Open the tensor-aware debugger at ``frame`` (default: the caller), printing ``header`` first.

    With a DAP client (VS Code) attached it stops there instead; without a terminal on stdin
    it logs where it would have stopped and returns, so a batch job never hangs.
    ``hide_library``: stop in ``frame`` right now (not at its next line) and leave torch's and
    tensor_dap's frames out of ``where``/``up``/``down`` and stepping: a trigger firing deep in
    an optimizer hook opens in the user's loop.
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
    debugger = TensorPdb(skip=LIBRARY_MODULES if hide_library else None)
    if header:
        from rich.text import Text

        debugger._print(Text(header))
    if hide_library:
        debugger.hide_frame = lambda f: is_library(f.f_code.co_filename)
        _stop_now(debugger, frame)
    else:
        debugger.hide_frame = _ours
        debugger.set_trace(frame)


def _ours(frame: Any) -> bool:
    """The frames that start the program (``frames.is_runner``), left out of where/up/down at a breakpoint or a
    crash, as ``python script.py`` would have none; torch's stay, the user may debug through it."""
    return is_runner(frame.f_code.co_filename)


_PACKAGE = __name__.partition(".")[0]
LIBRARY_MODULES = ["torch", "torch.*", _PACKAGE, f"{_PACKAGE}.*"]  # pdb's `skip`: never step into these


def _stop_now(debugger: TensorPdb, frame: Any) -> None:
    """``set_trace`` whose first stop is ``frame`` as it is now, mid-call, instead of its next line.

    The prompt opens at once (like a post-mortem, on a live frame); tracing is switched on only
    if the user steps, so ``c`` costs nothing afterwards and ``q`` ends the program as in pdb.
    """
    debugger.reset()
    f = frame
    while f is not None:
        f.f_trace = debugger.trace_dispatch
        debugger.botframe = f
        f = f.f_back
    debugger.interaction(frame, None)
    if debugger.quitting:
        raise bdb.BdbQuit
    if debugger.stoplineno == -1 and debugger.stopframe is debugger.botframe and not debugger.breaks:
        return  # continue: set_continue already took the trace functions away
    sys.settrace(debugger.trace_dispatch)


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
    debugger.hide_frame = _ours
    debugger.reset()
    debugger.interaction(None, tb)
