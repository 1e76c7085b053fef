"""Notes under the errors ``backward()`` raises with a message that names no line of the program.

torch's "modified by an inplace operation" names a node and a shape (``inplace_crash``); "Trying to backward
through the graph a second time" suggests ``retain_graph=True`` (``freed_graph``); "element 0 of tensors does not
require grad" says only that the loss has no graph (``no_graph``). While a watch listens to
``backward()``, the error gets a note saying which tensor and which line (a note under its message; on Python
< 3.11 a line before it), and the same line goes to the ``tensor_dap.triggers`` log.
"""

from __future__ import annotations

import logging
from typing import Any

from ..debug import torch_errors
from . import active, freed_graph, inplace_crash, no_graph

log = logging.getLogger("tensor_dap.triggers")


def explain(loss: Any, error: BaseException, previous: Any = None) -> str | None:
    """The note for ``error`` raised by ``backward()`` on ``loss``, or None. ``previous``: the loss the last
    backward() that returned went through (None: not known)."""
    text = str(error)
    if torch_errors.SECOND_TIME in text:
        inputs = [found for w in active.watches() if hasattr(w, "step_inputs") for found in w.step_inputs()]
        return freed_graph.explain(inputs, loss, previous)
    if torch_errors.NO_GRAPH in text:
        return no_graph.explain(loss, active.watches())
    return inplace_crash.explain(loss, error)


def annotate(loss: Any, error: BaseException, previous: Any = None) -> None:
    """Add the explanation to ``error`` when there is one; never raises."""
    try:
        text = explain(loss, error, previous)
        if text is None:
            return
        from ..console import log_unprinted

        log_unprinted(log, logging.WARNING, f"tensor_dap: {text}")  # the error's note or the line below shows it
        if hasattr(error, "add_note"):
            error.add_note(f"tensor_dap: {text}")
        else:
            from .aftermath import say

            say(f"tensor_dap: {text}")
    except Exception:  # noqa: BLE001 - an explanation must not replace the program's own error
        pass
