"""Where is the user? Decides between the VS Code debugger, a terminal prompt, or neither.

Triggers and ``set_trace`` both ask this before stopping, so a breakpoint never hangs a
batch job and always lands in the debugger the user is actually looking at.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Optional


def dap_client_attached() -> bool:
    """True when a DAP client (VS Code, or any debugpy front end) is connected to this process."""
    debugpy = sys.modules.get("debugpy")
    if debugpy is None:
        return False
    try:
        return bool(debugpy.is_client_connected())
    except Exception:
        return False


def interactive_terminal() -> bool:
    """True when a person can answer a prompt: on stdin, or through a notebook's page (``notebook_prompt``)."""
    try:
        return bool(sys.stdin and not sys.stdin.closed and sys.stdin.isatty()) or notebook_prompt()
    except Exception:
        return False


def nobody_can_debug() -> bool:
    """No person can answer a stop anywhere in this job, as far as this process can tell: no terminal here, and no
    debugpy loaded (the way an IDE attaches, to this rank or, in the same program, another). A rank that may not
    stop then need not wait for a debugged one: a batch job."""
    return not interactive_terminal() and "debugpy" not in sys.modules


def notebook_prompt() -> bool:
    """True inside a Jupyter kernel whose cell now running may ask its page for input: ``input()`` (ipykernel's
    ``raw_input``), which pdb reads its commands with, is answered there, as ``pdb.set_trace()`` is in a notebook.
    A kernel run with no page to answer (``jupyter nbconvert --execute``, papermill) does not allow it."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        kernel = getattr(ipython.get_ipython(), "kernel", None)
        return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))
    except Exception:  # noqa: BLE001 - an IPython of another shape: no prompt
        return False


def watching(*, dap: bool = True) -> str | None:
    """Who can answer a stop right now: "dap" (a connected IDE), "terminal" (a person at stdin), or None.

    ``dap=False`` asks only about the terminal (after a stop in the IDE could not be made).
    """
    if dap and dap_client_attached():
        return "dap"
    if interactive_terminal():
        return "terminal"
    return None


def break_into_dap(frame: Optional[FrameType] = None) -> bool:
    """Stop the attached DAP client in ``frame`` (default: the caller's); False if that is not possible.

    debugpy.breakpoint() stops at its own caller, which would be tensor_dap's code; pydevd's
    settrace (what debugpy.breakpoint() uses underneath) takes the frame to stop in, so the
    user lands in their own frame. If that private entry point ever changes, fall back to
    the public API.
    """
    debugpy = sys.modules.get("debugpy")
    if debugpy is None:
        return False
    target = frame if frame is not None else sys._getframe(1)
    try:
        from debugpy.server import api

        api._settrace(suspend=True, trace_only_current_thread=True, patch_multiprocessing=False,
                      stop_at_frame=target)
        return True
    except Exception:
        pass
    try:
        debugpy.breakpoint()
        return True
    except Exception:
        return False
