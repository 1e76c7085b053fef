"""An op called from inside one of tensor_dap's ``TorchFunctionMode``\\ s, whose warnings keep their place.

A mode runs each op again itself (``func(*args, **kwargs)`` in its ``__torch_function__``), so a warning the op gives
about its caller (``stacklevel=2``, as ``F.dropout2d`` warns of a 2-D input; or any warning from C++, which names the
Python frame calling the op) names the mode's line in tensor_dap, and, being at a new place, is shown again even where
the program's own call showed it already (pytorch/examples' mnist_rnn printed its dropout2d warning twice, the second
"from" ``live_dropout.py``). ``call`` gives such a warning where the program called the op, through that module's
registry of warnings shown: once per place, as without the mode.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Callable

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tensor_dap's own files
_DISPATCH = (os.path.join("torch", "overrides.py"), os.path.join("torch", "utils", "_python_dispatch.py"))


def call(func: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)``, its warnings given where the program called it. The warnings module's filters are
    left alone (changing them, as ``catch_warnings`` does, would show every warning of the program again once): its
    ``showwarning`` is borrowed while ``func`` runs, to hold what passed the filters."""
    held: list[tuple[Any, ...]] = []
    shown = warnings.showwarning

    def hold(*warning: Any, **where: Any) -> None:
        held.append((warning, where))

    warnings.showwarning = hold
    try:
        return func(*args, **kwargs)
    finally:
        warnings.showwarning = shown
        if held:
            _give(held, func, sys._getframe(1), shown)


def _give(held: list[tuple[Any, ...]], func: Callable[..., Any], mode_frame: Any, shown: Callable[..., Any]) -> None:
    for warning, where in held:
        message, category, filename, lineno = warning[:4]
        frame = _program_frame(func, mode_frame) if os.path.abspath(filename).startswith(_PACKAGE) else None
        if frame is None:  # where the op itself said it (torch's code), that place's registry passed it: shown as is
            shown(*warning, **where)
            continue
        namespace = frame.f_globals  # about its caller: given there, once per place as without the mode
        registry = namespace.setdefault("__warningregistry__", {})
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                               module=namespace.get("__name__"), registry=registry, module_globals=namespace)


def _program_frame(func: Callable[..., Any], frame: Any) -> Any:
    """The frame that called ``func``, above ``frame`` (the mode's): past tensor_dap's frames, torch's dispatch to
    modes, and the frame of ``func`` itself where it is a Python function (``F.dropout2d`` handed its call to the mode
    from its own frame)."""
    code = getattr(func, "__code__", None)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (frame.f_code is code or name.startswith(_PACKAGE) or name.endswith(_DISPATCH)):
            return frame
        frame = frame.f_back
    return None
