"""The bugs a loop makes without an error, that ``watch`` says in one line: what it looks at, and when.

Each is looked at where it costs nothing a step: the model's mode at each update (one attribute,
``eval_mode``); the graph of the first loss handed to ``backward()`` (a loss given what it computes itself,
``loss_misuse``); at the first updates only, the parameters the optimizer does not hold (``unoptimized``)
and gradients carried into the next step (``zero_grad``); at the end of the run, what those found.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import eval_mode
from .aftermath import say
from .loss_misuse import misuse
from .loss_tap import listen
from .stop import guarded
from .unoptimized import Unoptimized
from .zero_grad import CHECKS, MissingZeroGrad


class SilentChecks:
    """One watch's: its model updated in eval mode, parameters it never updates, no zero_grad between steps."""

    def __init__(self) -> None:
        self.eval_said = False  # an update in eval mode was looked at (said, where the mode changes anything)
        self._unoptimized = Unoptimized()
        self._zero_grad = MissingZeroGrad(say)
        self._stop_misuse: Any = listen(functools.partial(guarded, "tensor_dap.watch", self._first_loss))

    def _first_loss(self, loss: torch.Tensor) -> None:
        """The first loss handed to backward() while watched: its graph, read once (before backward frees it)."""
        self._stop_listening()
        text = misuse(loss)
        if text is not None:
            say(f"tensor_dap: {text} (said once)")

    def _stop_listening(self) -> None:
        stop, self._stop_misuse = self._stop_misuse, None
        if stop is not None:
            stop()

    def early_update(self, update: int, model: torch.nn.Module, optimizer: Any, params: list[torch.Tensor],
                     step: int) -> None:
        """The ``update``-th update the watch sees (0 the first) is about to run, as ``step``."""
        if update == 0:
            self._unoptimized.first_update(model, optimizer)
        if update < CHECKS:
            self._zero_grad.updating(params, step)

    def in_eval_mode(self, model: torch.nn.Module, step: int) -> None:
        """``model`` is updated in eval mode at ``step``: said once."""
        self.eval_said = True
        eval_mode.say_once(model, step)

    def at_end(self) -> str | None:
        """The end of the run: the line about parameters never updated, if any; nothing listens after."""
        self._zero_grad.close()
        self._stop_listening()
        return self._unoptimized.at_end()
