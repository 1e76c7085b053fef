"""A re-run's backward, let through by frameworks that refuse a backward they did not start.

Lightning Fabric hooks the outputs of a model it set up (``fabric.setup``) with a check that the backward came
through ``fabric.backward(loss)`` (its precision's and strategy's pre/post steps), for precisions that have them
(``bf16-mixed``): the unchanged loop's re-run, which sends the captured output gradients back itself, failed there
("requires you to call `fabric.backward(loss)`") and named only the module holding the gradient. Within
``as_framework_backward`` such a flag reads as set; it is put back after.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

FLAGS = (("lightning.fabric.wrappers", "_in_fabric_backward"), ("lightning_fabric.wrappers", "_in_fabric_backward"))


@contextlib.contextmanager
def as_framework_backward() -> Iterator[None]:
    """Within, the frameworks loaded take a backward as their own (nothing is imported: only ones the program uses)."""
    saved = []
    for name, flag in FLAGS:
        module = sys.modules.get(name)
        if module is not None and isinstance(getattr(module, flag, None), bool):
            saved.append((module, flag, getattr(module, flag)))
            setattr(module, flag, True)
    try:
        yield
    finally:
        for module, flag, value in saved:
            setattr(module, flag, value)
