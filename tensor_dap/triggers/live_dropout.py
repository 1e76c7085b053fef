"""Dropout left on in evaluation: ``F.dropout(x, p)`` in a model's forward without ``training=self.training``.

``nn.Dropout`` follows its module's mode; the functional form does not: its ``training`` defaults to True, so after
``model.eval()`` it still drops activations, and every evaluation is noisy (and worse) with no error. The first
forward of the model in eval mode under ``torch.no_grad()`` (an evaluation) runs under a ``TorchFunctionMode`` that
looks at each dropout call: one with ``training=True`` and ``p > 0`` is said once, with its line. That forward gives
what it would have (the mode only looks); later forwards run untouched, and a model with a compiled part is not looked
at (the mode would have dynamo trace it again). A dropout call there that is off (``training=self.training``) is
kept too: it follows the model's mode, so a model then left in eval mode trains with it off (``eval_mode``).
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..debug.frames import user_line
from . import as_called
from .aftermath import say

# the dropouts whose flag is ``training`` (default True), and torch's own, whose flag is ``train`` (no default)
_FUNCTIONAL = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout}
MAX_MODULES = 100_000  # looked at for a compiled one, at most
_TORCH = {torch.dropout, torch.alpha_dropout, torch.feature_dropout, torch.feature_alpha_dropout}


Spotted = tuple[str, Any]  # a dropout call: its name with its p ("dropout(p=0.6)") and the user's line (or None)


class _Spotter(TorchFunctionMode):
    """Notes the first dropout call that drops (``found``) and the first that is switched off (``off``)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: Spotted | None = None
        self.off: Spotted | None = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.found is None and (func in _FUNCTIONAL or func in _TORCH):
            try:
                self._look(func, args, kwargs)
            except Exception:  # noqa: BLE001 - looking must never change the forward
                pass
        return as_called.call(func, args, kwargs)

    def _look(self, func: Any, args: tuple, kwargs: dict) -> None:
        flag = "training" if func in _FUNCTIONAL else "train"
        on = kwargs.get(flag, args[2] if len(args) > 2 else func in _FUNCTIONAL)
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        if not (isinstance(p, (int, float)) and p > 0) or (on is not True and self.off is not None):
            return
        spotted = (f"{func.__name__}(p={p:g})", user_line())
        if on is True:
            self.found = spotted
        elif on is False:
            self.off = spotted


def checked_forward(model: torch.nn.Module, inner: Callable[..., Any], args: tuple,
                    kwargs: dict) -> tuple[Any, Spotted | None]:
    """``inner(*args, **kwargs)``, the model's first evaluation in eval mode, with its dropout calls looked at (not
    where a submodule is compiled: the mode would have dynamo trace it again; the root's own call is the capture's,
    and a compiled root is not handed here); with the first dropout call that was off, if one was."""
    if any(type(m).__name__ == "OptimizedModule" or m.__dict__.get("_compiled_call_impl") is not None
           for m in islice(model.modules(), 1, MAX_MODULES)):
        return inner(*args, **kwargs), None
    spotter = _Spotter()
    with spotter:
        output = inner(*args, **kwargs)
    if spotter.found is not None:
        op, line = spotter.found
        at = f" at {line} (`{line.code}`)" if line is not None and line.code else ""
        say(f"tensor_dap: {type(model).__name__} is in eval mode, but {op}{at} still drops activations in its "
            "evaluation: the functional dropout's training flag defaults to True and does not follow model.eval(). "
            "Pass training=self.training, or use an nn.Dropout layer (said once)")
    return output, spotter.off
