"""Route ``breakpoint()`` and, optionally, uncaught exceptions to tensor_dap's debugger."""

from __future__ import annotations

import os
import sys


def install(*, post_mortem: bool = False) -> None:
    """Route ``breakpoint()`` to the tensor-aware debugger; with ``post_mortem``, also uncaught exceptions.

    ``PYTHONBREAKPOINT=0`` still disables breakpoints. Child processes inherit the choice
    through ``PYTHONBREAKPOINT``.
    """
    from .session import set_trace

    if os.environ.get("PYTHONBREAKPOINT") != "0":
        sys.breakpointhook = set_trace
        os.environ.setdefault("PYTHONBREAKPOINT", "tensor_dap.set_trace")
    if post_mortem:
        from .crash import excepthook

        sys.excepthook = excepthook
