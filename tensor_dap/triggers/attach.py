"""``attach``: put a ``watch`` on a training program that was not written for tensor_dap.

``tensor-dap run --guard`` sees optimizers, not the user's model; ``attach`` takes the optimizer
and finds the model itself: the modules called until the optimizer's first ``step()`` are noted,
and the model is the root one among them (not a submodule of another) holding most of the
optimizer's parameters. The watch is attached inside that first step, before its update, so the
first update is checked too; from then on it is an ordinary unchanged-loop ``watch``. Call
``close()`` when the program ends (the watch also closes itself at interpreter exit).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterable
from typing import Any, Optional

import torch

from .watch import watch


def find_model(modules: Collection[torch.nn.Module], optimizer: torch.optim.Optimizer
               ) -> tuple[Optional[torch.nn.Module], list[torch.nn.Module]]:
    """The root module among ``modules`` holding most of ``optimizer``'s parameters, and other roots holding some."""
    wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
    inner: set[int] = set()
    for m in modules:
        inner.update(id(sub) for sub in m.modules() if sub is not m)
    scored = []
    for m in modules:
        if id(m) in inner:
            continue
        held = sum(1 for p in m.parameters() if id(p) in wanted)
        if held:
            scored.append((held, m))
    scored.sort(key=lambda pair: -pair[0])
    if not scored:
        return None, []
    return scored[0][1], [m for _, m in scored[1:]]


class Attachment:
    """A watch attached from outside; ``.watch`` is None until the optimizer's first step names the model.

    ``others``: further root modules the optimizer also updates (not watched: they are named so the
    user knows). After the first step ``.watch`` stays None only when no called module holds the
    optimizer's parameters.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model: Optional[torch.nn.Module], options: dict[str, Any],
                 seen: Optional[Iterable[torch.nn.Module]] = None) -> None:
        self.optimizer, self.options = optimizer, options
        self.watch: Optional[watch] = None
        self.others: list[torch.nn.Module] = []
        self._noting: Any = None
        self._stepping: Any = None
        if model is None and seen is not None:  # the caller noted the modules already (tensor-dap run)
            model, self.others = find_model(list(seen), optimizer)
            if model is None:
                return
        if model is not None:
            self.watch = watch(model, optimizer, **options)
            return
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._seen: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._noting = register_module_forward_pre_hook(self._note)
        # global, so the watch's own pre-step hook (on the optimizer) is still called for this very step
        self._stepping = register_optimizer_step_pre_hook(self._first_step)

    def _note(self, module: torch.nn.Module, _args: Any) -> None:
        try:
            self._seen.add(module)
        except TypeError:  # an unhashable module (a custom __eq__ without __hash__)
            pass

    def _first_step(self, optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        if optimizer is not self.optimizer or self._noting is None:
            return  # (the hook stays registered: torch is iterating over the dict that holds it)
        self._noting.remove()
        self._noting = None
        model, self.others = find_model(list(self._seen), optimizer)
        self._seen = weakref.WeakSet()
        if model is not None:
            self.watch = watch(model, optimizer, **self.options)

    def close(self) -> None:
        for handle in (self._noting, self._stepping):
            if handle is not None:
                handle.remove()
        self._noting = self._stepping = None
        if self.watch is not None:
            self.watch.close()


def attach(optimizer: torch.optim.Optimizer, model: Optional[torch.nn.Module] = None, *,
           seen: Optional[Iterable[torch.nn.Module]] = None, **options: Any) -> Attachment:
    """Watch the model ``optimizer`` trains, without changing the program; ``options`` are ``watch``'s.

    ``model=None``: found at the optimizer's first step among the modules called before it (or
    among ``seen``, modules the caller noted, when the optimizer is already stepping).
    """
    return Attachment(optimizer, model, options, seen)
