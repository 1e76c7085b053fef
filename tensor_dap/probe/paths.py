"""A submodule's path as reports and tables print it, ``model.transformer.h.0.attn``, read as a value.

It is not Python (the ``0``), so the debugger's commands walk it attribute by attribute from its first
name: a ``ModuleList``'s or ``Sequential``'s ``0`` is an attribute of it (``nn.Module.__getattr__``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+")
_DOTTED = re.compile(r"\w+(?:\.\w+)*")


def is_module_path(text: str) -> bool:
    """A dotted name with a number among its parts: what Python cannot evaluate and a path walk can."""
    return _MODULE_PATH.fullmatch(text) is not None and any(part.isdigit() for part in text.split(".")[1:])


def value_at(path: str, evaluate: Callable[[str], Any]) -> tuple[Any, str | None]:
    """(the value at ``path``, None), or (None, one line saying which part is missing). ``evaluate`` gives
    the first name's value (it may raise: the caller reports that as it reports any expression)."""
    root, *parts = path.split(".")
    value, walked = evaluate(root), root
    for part in parts:
        try:
            value = getattr(value, part)
        except Exception:  # noqa: BLE001 - whatever the object raises: one line
            return None, f"{walked} ({type(value).__name__}) has no submodule or attribute {part!r}"
        walked = f"{walked}.{part}"
    return value, None


def rooted(path: str, defined: Callable[[str], bool], root: str) -> str:
    """``path``, or ``root.path`` when it is a dotted name whose first name the frame does not define: a row of
    the ``grads`` table names its submodule relative to the model it reports on (``transformer.h.0``, or ``0`` in
    a ``Sequential``)."""
    if _DOTTED.fullmatch(path) and not defined(path.split(".", 1)[0]):
        return f"{root}.{path}"
    return path
