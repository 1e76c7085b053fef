"""Parameters cut off from the loss: trained by the optimizer, yet no gradient ever reaches them.

``h = self.encoder(x).detach()`` left in a forward (from a feature-extraction experiment), ``.data`` taken of an
activation, a ``torch.no_grad()`` block around part of the model: the layers before the cut get no gradient, the
optimizer skips them, and the loss still falls through the layers after it. ``watch`` notes, at each of the first
``UPDATES`` updates, which of the model's parameters that require grad hold a gradient (one attribute each); those
that held none at any of them, while others did, are said once with their names. A model whose forward never calls
a submodule (BERT's pooler, unused for token outputs) is said too, worded so: nothing is wrong then. Updates with a
closure, and an optimizer holding none of the model's parameters (DeepSpeed's ZeRO), are not looked at; updates with
no gradient at all are ``step_order``'s.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks.result import names as listed
from .optimizer_call import param_ids

UPDATES = 20  # the first updates looked at (a mixture of experts' expert unused at all of them is rare)
SHOWN = 6  # names said, at most


class CutOff:
    """The model's parameters that got a gradient at some of the first ``UPDATES`` updates."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._reached: set[int] = set()  # indices into the watched parameters
        self._looked = 0

    def updating(self, update: int, model: torch.nn.Module, optimizer: Any, params: list[torch.Tensor],
                 closure: bool) -> None:
        """The ``update``-th update (0 the first) of ``optimizer`` is about to run."""
        if update >= UPDATES or closure or not params or len(self._reached) == len(params):
            return
        self._reached.update(i for i, p in enumerate(params) if p.grad is not None)
        self._looked += 1
        if self._looked < UPDATES or not self._reached:  # (none at all: step_order's line)
            return
        held = param_ids(optimizer) if hasattr(optimizer, "param_groups") else set()
        missing = [i for i in range(len(params))  # (one frozen since the watch began is meant to stay)
                   if i not in self._reached and id(params[i]) in held and params[i].requires_grad]
        if missing:
            self.say(_line(model, [params[i] for i in missing], len(params)))


def _line(model: torch.nn.Module, missing: list[torch.Tensor], of: int) -> str:
    names = {id(p): n for n, p in model.named_parameters()}
    shown = listed([names.get(id(p), "?") for p in missing], SHOWN)
    return (f"tensor_dap: {len(missing)} of {type(model).__name__}'s {of} parameters that require grad got no gradient "
            f"at any of its first {UPDATES} updates, so they never learn: {shown}. Something cuts "
            f"them off from the loss (a .detach() or .data in the forward, a torch.no_grad() block, an output the loss "
            f"does not use), or the forward never calls them (an unused pooler: then nothing is wrong); if they are "
            f"meant to stay as they are, requires_grad_(False) says so (said once)")
