"""The ops inside a backward written in Python (a custom ``autograd.Function``), seen by the op tracker.

torch runs ``backward()`` with the tracker's ``TorchFunctionMode`` off: the mode is popped to handle the
``backward()`` call itself. Torch's own backward formulas run in C++ and need no mode; a custom Function's
``backward`` is the user's Python, whose ``grad / x`` is the birthplace a report should name
(``SafeLog.backward``'s line, not only the line that called ``SafeLog.apply``). So the tracker is pushed again
around each such node: by a pre-hook on the node, popped by its post-hook.
"""

from __future__ import annotations

from typing import Any

from torch.autograd.function import BackwardCFunction
from torch.overrides import _get_current_function_mode_stack


def written_in_python(node: Any) -> bool:
    """Whether ``node`` runs a backward the program wrote (a custom ``autograd.Function``), not torch's; module
    backward hooks' plumbing (``BackwardHookFunctionBackward``) is not one."""
    return isinstance(node, BackwardCFunction) and type(node).__name__ != "BackwardHookFunctionBackward"


class PythonBackwards:
    """Pushes ``mode`` while a custom Function's backward runs (``enter`` as the node's pre-hook, ``leave`` at the
    start of its post-hook). Torch's engine puts the mode stack back as it was when ``backward()`` ends, so a push a
    raising backward left on is gone by then: ``leave`` and ``unwind`` pop only a push of ours still on top."""

    def __init__(self, mode: Any, on: bool = True) -> None:
        self.mode = mode
        self.on = on  # off: a re-run that failed with it on runs again without (a backward refusing a mode)
        self.pushed = 0
        self.entered = 0  # backwards run with the mode pushed, in all

    def enter(self, grad_outputs: Any) -> None:
        if not self.on:
            return
        try:
            self.mode.__enter__()
            self.pushed += 1
            self.entered += 1
        except Exception:  # noqa: BLE001 - not seeing inside this backward must not change it
            pass

    def leave(self) -> None:
        if self.pushed:
            self.pushed -= 1
            if _on_top(self.mode):
                self.mode.__exit__(None, None, None)

    def unwind(self, depth: int = 0) -> None:
        """Take off the pushes of ours past ``depth`` (those made inside a ``backward()`` that began there)."""
        while self.pushed > depth:
            self.leave()


def _on_top(mode: Any) -> bool:
    try:
        stack = _get_current_function_mode_stack()
    except Exception:  # noqa: BLE001 - a torch without it: nothing known to be ours
        return False
    return bool(stack) and stack[-1] is mode
