"""Gradients clipped outside ``backward()`` → ``step()``: the update uses them unclipped.

``clip_grad_norm_`` after ``optimizer.step()`` (or before ``loss.backward()``, on the gradients still there) clips
gradients no update uses: the run goes on unclipped, and a divergence that clipping was meant to stop happens
anyway. While the first ``UPDATES`` updates run, ``watch`` notes how many clips ``loss_tap`` had seen when each
``backward()`` returned; an update with no clip since the last ``backward()``, in a program that clips, is out of
order. Said once when ``LATE`` of those updates were. Gradient accumulation (several ``backward()`` calls, then
one clip and the update) is in order.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from . import loss_tap
from .stop import guarded

UPDATES = 3  # the first updates looked at
LATE = 2  # of them with no clip since the last backward(): said


class ClipOrder:
    """Whether a program that clips does so between the last ``backward()`` and each of its first updates."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._start = loss_tap.clips()  # clips the program made before this watch
        self._at_backward: int | None = None  # clips seen when the last backward() returned
        self._late = 0
        self._stop: Any = loss_tap.listen(functools.partial(guarded, "tensor_dap.watch", self._returned), done=True)

    def _returned(self, loss: Any) -> None:
        self._at_backward = loss_tap.clips()

    def updating(self, update: int) -> None:
        """The ``update``-th update (0 the first) is about to run."""
        if self._stop is None:
            return
        clips = loss_tap.clips()
        if clips > self._start and self._at_backward is not None and clips == self._at_backward:
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
