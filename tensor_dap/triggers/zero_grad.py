"""Gradients carried into the next step: no ``optimizer.zero_grad()`` between two updates.

``backward()`` adds to the gradients already there, so a loop that never resets them updates with the sum of every
gradient so far: the run trains (badly, with momentum it cannot have wanted) and nothing fails. Gradient
accumulation resets them after each update, so a gradient still there, untouched, when a ``backward()`` that
reaches the model begins, and still holding that sum at the next update, is this bug. At the first ``CHECKS``
updates the watch notes one parameter's gradient (the tensor, its version counter and a copy of 64 of its values)
and listens to the next ``backward()`` calls (``loss_tap``): one that begins with that gradient untouched and writes
into it added to it, and the next update tells: that sum, untouched since, is what it uses. A ``backward()`` that
does not reach the model (a GAN's other model, before this one's ``zero_grad()``) leaves it alone and is passed
over; one that reaches it after its update while the model resets before its next (DCGAN's generator step, whose
loss runs through the discriminator after the discriminator's update) is passed over at that reset; a reset
through ``.data`` (old code: ``p.grad.data.zero_()``) keeps the version but not the values. After those checks
nothing listens.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .finite import spread
from .stop import listen_guarded

CHECKS = 3  # updates followed
VALUES = 64  # of the gradient's elements compared, spread over it


class MissingZeroGrad:
    """Whether a gradient outlives an update into the next backward(); said once through ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.checks = 0
        # (the parameter, its gradient then, that gradient's version and a spread of its values, the update's step)
        self._noted: tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, int] | None = None
        self._stops: list[Callable[[], None]] = []
        self._suspect = False
        self._added = False  # a backward() added to the noted gradient (noted again as it left it): the update tells

    def updating(self, params: list[torch.Tensor], update: int) -> None:
        """An update is about to run (one of the first ``CHECKS`` + 1): after a backward() that added to the last
        update's gradient, with that sum untouched since, this one uses it; otherwise note a gradient to look at in
        the next step."""
        noted, added, self._added = self._noted, self._added, False
        if added and noted is not None and _untouched(*noted[:4]):
            self._say(noted[4])
            return
        if self.checks >= CHECKS:
            self.close()
            return
        self.checks += 1
        # the last parameter with a gradient: usually the output layer's, dense (an embedding's first rows are often
        # all 0: a token not in the batch)
        param = next((p for p in reversed(params) if p.grad is not None and p.grad.layout == torch.strided
                      and p.grad.numel()), None)
        if param is None:
            return
        grad = param.grad
        with torch.no_grad():
            values = spread(grad, VALUES)  # (on a device: nothing read now)
        self._noted = (param, grad, grad._version, values, update)
        if not self._stops:
            self._stops = [listen_guarded(self._before), listen_guarded(self._after, done=True)]

    def _before(self, loss: Any) -> None:
        """A backward() begins: the noted gradient untouched since the update makes it a suspect, else it was reset."""
        noted = self._noted
        if noted is not None:
            self._suspect = _untouched(*noted[:4])
            if not self._suspect:
                self._next()

    def _after(self, loss: Any) -> None:
        """The backward() returned: if it wrote into the untouched gradient, it added to the last step's."""
        noted, suspect, self._suspect = self._noted, self._suspect, False
        if noted is None or not suspect:
            return
        param, grad, version = noted[:3]
        if param.grad is grad and grad._version == version:
            return  # it did not reach this model: the next backward() tells
        total = param.grad  # the sum: a new tensor where backward() did not add in place (the one noted is held)
        if total is None or total.layout != torch.strided:
            self._next()
            return
        with torch.no_grad():  # noted as the next backward() or update must find it (on a device: nothing read)
            self._noted, self._added = (param, total, total._version, spread(total, VALUES), noted[4]), True

    def _say(self, update: int) -> None:
        self.checks = CHECKS
        self.say(f"tensor_dap: the gradients of step {update} were still there when the next step's backward() "
                 "began, so backward() added to them and each update uses the sum of every gradient so far: no "
                 "optimizer.zero_grad() between steps? Call it once per step, before backward() (said once)")
        self._next()

    def _next(self) -> None:
        self._noted, self._added = None, False
        if self.checks >= CHECKS:
            self.close()

    def close(self) -> None:
        """Stop listening (at the end of the checks, or of the watch)."""
        stops, self._stops = self._stops, []
        for stop in stops:
            stop()


def _untouched(param: torch.Tensor, grad: torch.Tensor, version: int, values: torch.Tensor) -> bool:
    """``param`` still holds ``grad``, not written since (its version; its values, for a reset through ``.data``, and
    not all 0: zeros look the same reset or not). The values are read only once the rest holds: a program that
    resets its gradients never waits for a device here."""
    try:
        return param.grad is grad and grad._version == version and torch.equal(spread(grad, VALUES), values) and \
            bool(values.any())
    except Exception:  # noqa: BLE001 - a gradient we cannot read again: not told
        return False
