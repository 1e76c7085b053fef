"""Why ``backward()`` says a tensor it needs "has been modified by an inplace operation", when the tensor is a
parameter: an update ran between the loss's forward and its ``backward()``.

torch names only a type and a shape (``[torch.FloatTensor [32, 1]], which is output 0 of TBackward0, is at version
2; expected version 1``) and suggests anomaly mode, which points at the forward op, not at what changed the
tensor. The usual cause is an ``optimizer.step()`` in between: a GAN stepping its discriminator before the
generator's ``backward()`` through it, or a loop calling ``step()`` before ``backward()``. While ``watch`` listens
to ``backward()``, such an error is matched against the parameters the failing loss's graph holds (its shape, or
the transpose torch saved, and its version counter now), which are named with the watched model and optimizer that
hold them. The explanation is added to the error (a note under its message; on Python < 3.11 a line before it).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

from torch import nn

from ..debug.frames import user_frame
from . import active
from .optimizer_call import param_ids
from .stray_params import graph_params

log = logging.getLogger("tensor_dap.triggers")

_SHAPE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\]")
_VERSION = re.compile(r"is at version (\d+); expected version (\d+)")


def explain(loss: Any, error: BaseException) -> str | None:
    """The parameter that ``error`` (from ``backward()`` on ``loss``) is about and what changed it, or None."""
    text = str(error)
    shape, version = _SHAPE.search(text), _VERSION.search(text)
    if "modified by an inplace operation" not in text or shape is None or version is None:
        return None
    size = tuple(int(n) for n in shape.group(1).replace(" ", "").split(",") if n)
    now, then = int(version.group(1)), int(version.group(2))
    params = graph_params(loss)
    found = [p for p in params if p._version == now and size in (tuple(p.shape), tuple(p.shape)[::-1])]
    if not found:
        return None
    name, optimizer = _named(found[0])
    updater = f"{type(optimizer).__name__}.step()" if optimizer is not None else "an optimizer.step() updating it"
    transposed = " (torch saved its transpose)" if size != tuple(found[0].shape) and len(size) > 1 else ""
    text = (f"the tensor backward() needs is {name}{transposed}, changed in place after this loss's forward (its "
            f"version went from {then} to {now}): {updater} ran between the forward and this backward(). Call "
            f"backward() before that update")
    held = param_ids(optimizer) if hasattr(optimizer, "param_groups") else set()
    if any(id(p) not in held for p in params):  # the loss is another model's too: a GAN's generator
        text += ("; in a GAN, run the generator's backward() before the discriminator's step(), or compute the "
                 "generator's loss from a new forward through the discriminator after its step")
    return text


def _named(param: nn.Parameter) -> tuple[str, Any]:
    """The parameter's name in a watched model, and that watch's optimizer (None when not known)."""
    for w in active.watches():
        model = getattr(w, "_inner", None)
        if not isinstance(model, nn.Module):
            continue
        for name, p in model.named_parameters():
            if p is param:
                optimizer = getattr(w, "optimizer", None) or getattr(w, "_stepper", None)
                return f"{_called(model)}'s parameter {name!r} {list(param.shape)}", optimizer
    return f"a parameter of shape {list(param.shape)}", None


def _called(model: nn.Module) -> str:
    """The name the user's code has for ``model`` (``D``, ``self.disc``), else its class's name."""
    frame = user_frame(sys._getframe(1))
    if frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key, value in list(scope.items()):
                if value is model and not key.startswith("_"):
                    return key
        owner = frame.f_locals.get("self")
        for key, value in list(getattr(owner, "__dict__", {}).items()):
            if value is model:
                return f"self.{key}"
    return type(model).__name__


def annotate(loss: Any, error: BaseException) -> None:
    """Add the explanation to ``error`` when there is one; never raises."""
    try:
        text = explain(loss, error)
        if text is None:
            return
        log.warning("tensor_dap: %s", text)
        if hasattr(error, "add_note"):
            error.add_note(f"tensor_dap: {text}")
        else:
            from .aftermath import say

            say(f"tensor_dap: {text}")
    except Exception:  # noqa: BLE001 - an explanation must not replace the program's own error
        pass
