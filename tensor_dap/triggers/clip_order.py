"""Gradients clipped outside ``backward()`` → ``step()``: the update uses them unclipped.

``clip_grad_norm_`` after ``optimizer.step()`` (or before ``loss.backward()``, on the gradients still there) clips
gradients no update uses: the run goes on unclipped, and a divergence that clipping was meant to stop happens
anyway. While the first ``UPDATES`` updates run, ``watch`` notes how many clips ``loss_tap`` had seen when each
``backward()`` returned; an update with no clip since the last ``backward()``, in a program that clips, is out of
order (when the program's last clip was handed this model's parameters: a GAN may clip its other model only).
Said once when ``LATE`` of those updates were. Gradient accumulation (several ``backward()`` calls, then one clip
and the update) is in order.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import loss_tap
from .stop import listen_guarded

UPDATES = 3  # the first updates looked at
LATE = 2  # of them with no clip since the last backward(): said


class ClipOrder:
    """Whether a program that clips does so between the last ``backward()`` and each of its first updates."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._start = loss_tap.clips()  # clips the program made before this watch
        self._at_backward: int | None = None  # clips seen when the last backward() returned
        self._late = 0
        self._stop: Any = listen_guarded(self._returned, done=True)

    def _returned(self, loss: Any) -> None:
        self._at_backward = loss_tap.clips()

    def updating(self, update: int, params: list[torch.Tensor]) -> None:
        """The ``update``-th update (0 the first) of the model holding ``params`` is about to run."""
        if self._stop is None:
            return
        clips = loss_tap.clips()
        if clips > self._start and self._at_backward is not None and clips == self._at_backward \
                and _clips_these(params):
            self._late += 1
        if update + 1 < UPDATES:
            return
        self.close()
        if self._late >= LATE:
            kind = "clip_grad_value_" if (loss_tap.clipping() or "").startswith("value") else "clip_grad_norm_"
            self.say(f"tensor_dap: {kind} does not run between loss.backward() and optimizer.step(): at {self._late} "
                     f"of the first {UPDATES} updates no clip came after the last backward(), so the optimizer steps "
                     f"with unclipped gradients (the clip acts on gradients no update uses); the order is "
                     f"loss.backward(), {kind}(...), optimizer.step() (said once)")

    def close(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


def _clips_these(params: list[torch.Tensor]) -> bool:
    """Whether the program's last clip was handed some of ``params`` or their gradients (a GAN may clip its other model
    only)."""
    clipped = loss_tap.last_clipped()
    if clipped is None:
        return False
    clipped = [clipped] if isinstance(clipped, torch.Tensor) else clipped
    if not isinstance(clipped, (list, tuple)):
        return False
    ours = {id(p) for p in params} | {id(p.grad) for p in params if p.grad is not None}
    return any(id(t) in ours for t in clipped)
