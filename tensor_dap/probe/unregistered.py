"""Layers a model keeps where torch does not look: a plain Python list, tuple or dict of modules (or parameters)
held as a module's attribute, instead of ``nn.ModuleList`` / ``nn.ModuleDict`` / ``nn.ParameterList``.

``model.parameters()`` (so the optimizer), ``state_dict()`` and ``.to()`` leave their layers out: they never
train, are not saved, and stay on the CPU when the model moves to a GPU. Read from the modules' own attributes
(bounded), nothing changed.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

MODULES = 10_000  # modules looked through, at most
ITEMS = 10_000  # items of one container looked at, at most


@functools.lru_cache(maxsize=1)
def _module_attrs() -> frozenset[str]:
    """What every module holds itself: its registries and hooks (torch imported when first asked: the doctor
    imports the checks on a machine whose torch may be broken)."""
    from torch import nn

    return frozenset(vars(nn.Module()))


class Unregistered(NamedTuple):
    holder: str  # the attribute holding them, as ``Net.blocks`` or ``encoder.layers``
    kind: str  # "list", "tuple" or "dict"
    params: list[tuple[str, Any]]  # (``Net.blocks[0].weight``, the parameter)


def unregistered(model: Any) -> list[Unregistered]:
    """Each plain container of layers or parameters a module of ``model`` holds, with the parameters inside that the
    model does not register some other way (an RNN keeps its own in a list, ``_flat_weights``)."""
    from torch import nn

    registered = {id(p) for p in model.parameters()}
    module_attrs = _module_attrs()
    found: list[Unregistered] = []
    for count, (path, module) in enumerate(model.named_modules()):
        if count >= MODULES:
            break
        for attr, value in vars(module).items():
            if attr in module_attrs or not isinstance(value, (list, tuple, dict)):
                continue
            holder = f"{path or type(model).__name__}.{attr}"
            items: Any = value.items() if isinstance(value, dict) else enumerate(value)
            params = []
            for key, item in itertools.islice(items, ITEMS):  # a list of a million samples: its first only
                named = [("", item)] if isinstance(item, nn.Parameter) else (
                    item.named_parameters() if isinstance(item, nn.Module) else [])
                params += [(f"{holder}[{key!r}]{'.' + name if name else ''}", p) for name, p in named
                           if id(p) not in registered]
            if params:
                found.append(Unregistered(holder, type(value).__name__, params))
    return found
