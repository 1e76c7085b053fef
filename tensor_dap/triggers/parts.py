"""Several models that one optimizer trains, watched as one: SAC's ``q_optimizer`` over two Q-networks the loop calls
one by one (``Adam(list(qf1.parameters()) + list(qf2.parameters()))``), a seq2seq's encoder and decoder, CLIP's two
towers. ``watch([qf1, qf2], q_optimizer)`` (or a dict of them) holds them in a ``Parts``, a module with no forward of
its own, so the unchanged loop's capture is around each of them (``LoopCapture._wrap``): one watch checks every
parameter the optimizer updates, re-runs each part's forwards, and names the part a NaN was born in (``qf2.fc1``).
Watching only the first of them left the other's gradients unchecked. A list's parts are named as the program names
them (its variables, ``self``'s attributes), else by position.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch

from ..debug.frames import name_of


class Parts(torch.nn.Module):
    """Modules trained together and called one by one, by name; never called itself."""

    def __init__(self, parts: dict[str, torch.nn.Module]) -> None:
        super().__init__()
        for name, module in parts.items():
            self.add_module(name, module)

    def names(self) -> str:
        """``[qf1, qf2]``: how a ``replay`` line hands them over."""
        return f"[{', '.join(name for name, _ in self.named_children())}]"


def as_model(model: Any) -> torch.nn.Module:
    """``model`` itself, or ``Parts`` of a list, tuple or dict of modules (named as the caller of our caller, the
    program, names them, or by position); TypeError for anything else."""
    if isinstance(model, torch.nn.Module):
        return model
    frame = sys._getframe(2)
    if isinstance(model, dict) and model and all(isinstance(k, str) and k and "." not in k and
                                                 isinstance(v, torch.nn.Module) for k, v in model.items()):
        return _named(dict(model))
    if isinstance(model, (list, tuple)) and model and all(isinstance(m, torch.nn.Module) for m in model):
        return _named(names_for(list(model), frame))
    raise TypeError(f"model: expected a torch.nn.Module, or a list or dict of the modules one optimizer trains, got "
                    f"{type(model).__name__}")


def names_for(modules: list[torch.nn.Module], frame: Any) -> dict[str, torch.nn.Module]:
    """The names ``frame`` and its callers give ``modules`` (``self.qf1`` is ``qf1``), else their positions."""
    named: dict[str, torch.nn.Module] = {}
    for i, module in enumerate(modules):
        found = name_of(module, frame, outward=True) if frame is not None else None
        found = found.rsplit(".", 1)[-1] if found else None  # (``self.qf1``: ``qf1``)
        named[found if found and found.isidentifier() and found not in named else str(i)] = module
    return named


def parts_of(modules: list[torch.nn.Module], frame: Any) -> Parts:
    """The ``Parts`` of ``modules`` found training under one optimizer, named as ``frame`` and its callers name them
    (in the order of their names: the modules were noted in no order)."""
    return _named(dict(sorted(names_for(modules, frame).items())))


def _named(parts: dict[str, torch.nn.Module]) -> Parts:
    """A ``Parts`` whose class is named after them (``qf1+qf2``): what a report and the run's last line call it."""
    return type("+".join(parts), (Parts,), {})(parts)


def as_saved(keys: Iterable[str], model: torch.nn.Module, modules: Iterable[torch.nn.Module], frame: Any
             ) -> torch.nn.Module:
    """The model a bundle's state (its ``keys``) was saved from, among the program's ``modules``: ``model`` where the
    keys are its own, else the ``Parts`` of the modules the program names as the bundle names its parts (a seq2seq's
    ``watch([encoder, decoder], ...)`` saves ``encoder.*`` and ``decoder.*``, and the first optimizer to step holds
    only the encoder's parameters); ``model`` where no such parts are found (loading the state then says why)."""
    keys = list(keys)
    saved = set(keys)
    if not saved or saved == set(model.state_dict()):
        return model
    wanted = list(dict.fromkeys(key.split(".", 1)[0] for key in keys))  # in the bundle's order
    named = names_for(list(dict.fromkeys(modules)), frame)
    if not all(name in named for name in wanted):
        return model
    parts = _named({name: named[name] for name in wanted})
    return parts if set(parts.state_dict()) == saved else model
