"""Where a model flattens with ``view(-1, n)``: the usual cause of "Expected input batch_size (16) to match target
batch_size (8)", raised at the loss, long after the forward that changed the batch size has returned.

``x.view(-1, 16 * 5 * 5)`` makes as many rows as the elements allow, not the batch's: when ``n`` is not the features
per sample (an input of another size, a layer changed), the batch size changes with no error until the loss. The
failing frame's models (by name, in its locals and globals) and their submodules have their classes' ``forward``
read as source (read, never run; torch's own classes left out) for such a line.
"""

from __future__ import annotations

import inspect
import re
from itertools import islice
from typing import Any

from . import static
from .static import is_module

_FLATTEN = re.compile(r"\.(?:view|reshape)\(\s*-1\s*,")
MODULES = 1000  # of the frame's models' submodules looked at, at most
NAMES = 200  # of the frame's names looked at for models, at most


def flattening_line(namespaces: list[dict[str, Any]]) -> str:
    """"`x = x.view(-1, 400)` in Net.forward (model.py:42)": the first such line of the models ``namespaces`` hold;
    '' when none."""
    seen: set[type] = set()
    for namespace in namespaces:
        for value in islice(list(namespace.values()), NAMES):
            if not is_module(value):
                continue
            for module in islice(_modules(value), MODULES):
                kind = type(module)
                if kind in seen or kind.__module__.startswith("torch."):
                    continue
                seen.add(kind)
                found = _in_forward(kind)
                if found:
                    return found
    return ""


def _modules(model: Any) -> Any:
    try:
        return model.modules()  # torch's own walk of _modules: no user code
    except Exception:  # noqa: BLE001 - a module that cannot be walked: itself only
        return iter([model])


def _in_forward(kind: type) -> str:
    forward = static.lookup(kind, "forward")
    if not inspect.isfunction(forward):
        return ""
    try:
        lines, start = inspect.getsourcelines(forward)
        path = inspect.getsourcefile(forward) or ""
    except (OSError, TypeError):
        return ""
    for i, text in enumerate(lines):
        code = text.split("#", 1)[0]
        if _FLATTEN.search(code):
            return f"`{code.strip()}` in {kind.__name__}.forward ({path.rsplit('/', 1)[-1]}:{start + i})"
    return ""
