"""The names a report's ``tensor_dap.replay(...)`` line gives the model and the optimizer: the program's own.

The report says how to re-run its failing step, a line to type at the prompt its stop opens or to paste into the
loop; the loop holds its model and optimizer under names of its own (minDiffusion's ``ddpm`` and ``optim``), so they
are looked up by identity in the frame the stop opens in (``stop.stop_frame``): the model as it was handed to the watch
(a DDP or compiled wrapper) or the module inside it; an optimizer the loop holds inside a wrapper of a library's by
that wrapper's attribute (accelerate's ``AcceleratedOptimizer``: ``opt.optimizer``). A name not found there stays
"model" or "optimizer".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..debug.frames import name_of, names_in
from .parts import Parts
from .stop import stop_frame

WRAPPED_AS = ("optimizer", "module", "model", "_orig_mod")  # where wrappers keep what they wrap (a plain attribute)


def program_names(models: Sequence[Any], optimizer: Any) -> dict[str, str]:
    """{"model": name, "optimizer": name} for those the stop's frame holds under another name than that."""
    frame = stop_frame(sys._getframe(1))
    names = {}
    for key, candidates in (("model", models), ("optimizer", () if optimizer is None else (optimizer,))):
        found = next((name for obj in candidates if (name := _held(obj, frame)) is not None), None)
        if found is None and key == "model" and isinstance(models[0], Parts):
            found = models[0].names()  # several modules one optimizer trains: handed over as a list
        if found is not None and found != key:
            names[key] = found
    return names


def _held(obj: Any, frame: Any) -> str | None:
    name = name_of(obj, frame)
    if name is not None:
        return name
    for name, value in names_in(frame, globals_too=True):  # inside a wrapper: its instance attribute, no property run
        own = getattr(value, "__dict__", None)
        if not name.startswith("_") and isinstance(own, dict):
            attribute = next((a for a in WRAPPED_AS if own.get(a) is obj), None)
            if attribute is not None:
                return f"{name}.{attribute}"
    return None
