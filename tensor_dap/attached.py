"""Where is the user? Decides between the VS Code debugger, a terminal prompt, or neither.

Triggers and ``set_trace`` both ask this before stopping, so a breakpoint never hangs a
batch job and always lands in the debugger the user is actually looking at.
"""

from __future__ import annotations

import sys


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
    """True when a person can answer a prompt on stdin."""
    try:
        return bool(sys.stdin and not sys.stdin.closed and sys.stdin.isatty())
    except Exception:
        return False


def break_into_dap() -> bool:
    """Stop in the attached DAP client at the caller's frame; False if that is not possible."""
    debugpy = sys.modules.get("debugpy")
    if debugpy is None:
        return False
    try:
        debugpy.breakpoint()
        return True
    except Exception:
        return False
