"""The names a report's ``tensor_dap.replay(...)`` line gives the model and the optimizer: the program's own.

The report says how to re-run its failing step, a line to type at the prompt its stop opens or to paste into the
script; the loop holds its model and optimizer under names of its own (minDiffusion's ``ddpm`` and ``optim``), so
they are looked up by identity in the frames of the program's code running the step, innermost first
(``frames.held_as``): the model as it was handed to the watch (a DDP or compiled wrapper), or the module inside it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..debug.frames import held_as


def program_names(models: Sequence[Any], optimizer: Any) -> dict[str, str]:
    """{"model": name, "optimizer": name} for those the program's frames hold under another name than that."""
    frame = sys._getframe(1)
    names = {}
    for key, candidates in (("model", models), ("optimizer", () if optimizer is None else (optimizer,))):
        found = next((name for obj in candidates for name, holder in held_as(obj, frame, outward=True)
                      if holder is None), None)
        if found is not None and found != key:
            names[key] = found
    return names
