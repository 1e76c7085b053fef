"""Updates that find no gradient: ``optimizer.step()`` before ``loss.backward()``, or ``zero_grad()`` between them.

A loop written ``zero_grad(); step(); backward()``, or ``backward(); zero_grad(); step()``, hands every update
gradients that are ``None``: torch's optimizers skip such parameters, so the model never changes, the loss stays
where it started and nothing fails. At the first ``UPDATES`` updates ``watch`` looks whether any of the model's
parameters that require grad has a gradient (one attribute each); when none did at any of them, it is said
once. An update with a closure (LBFGS) computes its gradients inside ``step()`` and is not looked at, nor is an
optimizer holding none of the model's parameters (DeepSpeed's ZeRO keeps the gradients in buffers of its own and
steps flat copies).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .optimizer_call import param_ids

UPDATES = 3  # the first updates looked at; all of them gradient-less is said


class GradlessUpdates:
    """Counts the first updates that found no gradient on any parameter; says it once through ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._gradless = 0

    def updating(self, update: int, model: torch.nn.Module, optimizer: Any, params: list[torch.Tensor],
                 closure: bool) -> None:
        """The ``update``-th update (0 the first) of ``optimizer`` is about to run."""
        if update >= UPDATES or closure or not params or any(p.grad is not None for p in params):
            return
        if not hasattr(optimizer, "param_groups") or not param_ids(optimizer) & {id(p) for p in params}:
            return
        self._gradless += 1
        if self._gradless == UPDATES:
            self.say(f"tensor_dap: optimizer.step() found no gradient on any of {type(model).__name__}'s parameters "
                     f"at each of its first {UPDATES} updates, so the model never changes: step() before "
                     f"loss.backward(), or zero_grad() between backward() and step()? The order is "
                     f"optimizer.zero_grad(), loss.backward(), optimizer.step() (said once)")
