"""Which loss is the unchanged loop's step's, and which forwards make that step: mixed into ``loop.LoopCapture``,
whose state it reads (see its ``__init__``).

Every ``backward()`` of the program comes to ``backward_called``. With one watch open the loss is the latest
forward's; with several (a GAN's two models) it is this step's once it is seen to reach the latest forward's
outputs (``settle``). A reset of the gradients between a forward and its ``backward()`` with no update in between
(SAC: the actor's ``backward()`` reached the critic, then ``q_optimizer.zero_grad()`` came after the critic's next
forward) discards what that earlier ``backward()`` reached: its forwards and losses were another pass's.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable

import torch

from .active import open_watches
from .forwards import Forward, loss_value, step_nodes
from .loss_graph import read as read_loss

_getframe = sys._getframe
_isfinite = math.isfinite


class StepLosses:
    """Mixed into ``LoopCapture``: the state it reads is the capture's own."""

    forwards: list[Forward]
    losses: list[torch.Tensor]
    pending: tuple[Forward, Any, list[Any]] | None
    on_loss: Callable[[Any], None]
    on_unstepped: Callable[[], None]
    enabled: bool

    def backward_called(self, loss: torch.Tensor) -> None:
        """A loss was handed to backward() (``loss_tap``: every backward() of the program comes here). With one watch
        open, it is the latest forward's. With several (a GAN's two models), not every loss reaches every model: it
        is this step's once the gradients of the latest forward's outputs are seen replaced by it (``settle``, at the
        next backward or the step's end). A non-finite loss on the CPU (read now: no sync there) has its graph read
        before backward() frees what its nodes saved: if it reaches the outputs, it is the forward's loss, with the
        op that made it (``loss_graph``) and this backward()'s line, looked up once a step."""
        if self.pending is not None:
            self.settle()
        if self._backward_seen and self._open and self._probe is not None and self._probe.grad is None:
            self._discard()  # reset since this step's last backward(), with no update
        self._unused = 0
        forwards = self.forwards
        if not (self.enabled and forwards):
            return
        f = forwards[-1]
        f.loss_tensor = loss  # (its graph's structure, should a non-finite gradient reach the outputs)
        kept = loss_value(loss)
        if len(open_watches) > 1:
            self.pending = (f, kept, f.marks())
        else:  # alone, nothing to tell apart: it is this step's
            self._accept(f, kept)
        line = self._line
        if line is None:  # above: loss_tap's wrapper, then Tensor.backward or the caller of torch.autograd.backward
            line = self._line = self._backwards.at(_getframe(2))
        if type(kept) is float and not _isfinite(kept) and not f.graph_read:
            graph = read_loss(loss, step_nodes(forwards), _getframe(1))  # (a PINN's residual comes
            # between its two forwards: the interior points', then the boundary's)
            if graph.reaches:
                here = self._backwards.at(_getframe(2))  # this backward()'s line, not the step's first
                f.loss, f.loss_birth, f.backward_at, f.graph_read = kept, graph.birth, here, True
        if f.retained:
            self._backward_seen = True
            if f.backward_at is None:
                f.backward_at = line

    def _discard(self) -> None:
        """The gradients were reset between a forward and its backward() with no update (SAC: the actor's backward()
        reached the critic, then ``q_optimizer.zero_grad()`` came after the critic's forward): the forwards that
        earlier backward() reached, and its losses, were another pass's; the step goes on with the rest."""
        self.forwards = [f for f in self.forwards if not f.reached()]
        self._backward_seen, self.losses = False, []
        self.on_unstepped()

    def step_forwards(self) -> list[Forward]:
        """This step's forwards, to re-run: one whose output's gradient no hook saw arrive (held weakly, or not the
        step's last) is given the line that called backward() in this step."""
        if self._line is not None:
            for f in self.forwards:
                if f.backward_at is None:
                    f.backward_at = self._line
        return list(self.forwards)

    def settle(self) -> None:
        """The last loss handed to backward() is this step's if it reached the latest forward's outputs."""
        pending, self.pending = self.pending, None
        if pending is not None:
            f, kept, before = pending
            if not before or any(now is not then for now, then in zip(f.marks(), before)):  # none: not told apart
                self._accept(f, kept)

    def _accept(self, f: Forward, kept: torch.Tensor) -> None:
        """``kept`` is the loss of ``f``'s step."""
        if f.loss is None:
            f.loss = kept
        self.on_loss(kept)
