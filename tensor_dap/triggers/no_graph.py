"""Why ``backward()`` says "element 0 of tensors does not require grad and does not have a grad_fn": which of the
three usual causes it is.

torch says only that the loss has no graph. While ``watch`` listens, the note says whether every parameter of the
watched model is frozen (``requires_grad=False``), whether no forward of the model ran with gradients on in this step
(the loss computed inside ``torch.no_grad()`` or ``torch.inference_mode()``, or after
``torch.set_grad_enabled(False)``), or, when a forward did make a graph, that the loss was computed from values
taken off it (``.item()``, ``.detach()``, ``.numpy()``, ``.data``, ``torch.tensor(...)`` of a tensor).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def explain(loss: Any, watches: list[Any]) -> str | None:
    """The note for a ``loss`` with no graph, from what the open ``watches`` saw; None when they saw nothing."""
    if not isinstance(loss, torch.Tensor) or loss.requires_grad:
        return None
    still_off = "" if torch.is_grad_enabled() else " (gradients are still off where backward() is called)"
    unseen: str | None = None  # what a watch that did not see the step's forwards can say
    for w in watches:
        model = getattr(w, "_inner", None)
        if not isinstance(model, nn.Module):
            continue
        name = type(model).__name__
        params = list(model.parameters())
        if params and not any(p.requires_grad for p in params):
            return (f"the loss handed to backward() has no graph: every parameter of {name} has requires_grad=False, "
                    "so nothing in it can learn. Set requires_grad_(True) on the layers to train (a freeze left on "
                    "every layer, or a model loaded for inference)")
        loop = getattr(w, "_loop", None)
        if loop is None or loop.dropped is not None:  # ``w.step`` (its forwards not seen one by one), or not kept
            unseen = unseen or _unseen(name)
            continue
        forwards = w.step_inputs()
        if not forwards:
            return (f"the loss handed to backward() has no graph: no forward of {name} ran with gradients on in "
                    "this step, so its output had none. Compute the training loss outside torch.no_grad() / "
                    f"torch.inference_mode(), and after torch.set_grad_enabled(True){still_off}")
        line = forwards[-1][1]
        at = f" at {line} (`{line.code}`)" if line is not None and line.code else ""
        return (f"the loss handed to backward() has no graph, while the forward of {name}{at} made one: the loss was "
                "computed from values taken off it (`.item()`, `.detach()`, `.numpy()`, `.data`, or `torch.tensor()` "
                f"of a tensor). Compute it from the model's output with torch ops{still_off}")
    return unseen


def _unseen(name: str) -> str:
    """The note when the step's forwards were not seen one by one (``w.step``): gradients off now, or two causes."""
    if not torch.is_grad_enabled():
        return (f"the loss handed to backward() has no graph: gradients are off where backward() is called, so the "
                f"forward of {name} before it made none (the step runs under torch.no_grad() or "
                "torch.inference_mode(), a decorator included, or after torch.set_grad_enabled(False)). Run the "
                "training step with gradients on")
    return (f"the loss handed to backward() has no graph: the forward of {name} ran under torch.no_grad() / "
            "torch.inference_mode(), or the loss was computed from values taken off its output (`.item()`, "
            "`.detach()`, `.numpy()`, `.data`, `torch.tensor()` of a tensor)")
