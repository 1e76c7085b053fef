"""The bugs a loop makes without an error, that ``watch`` says in one line: what it looks at, and when.

Each is looked at where it costs nothing a step: the model's mode at each update (one attribute,
``eval_mode``); the graph of the first loss handed to ``backward()`` (a loss given what it computes itself,
``loss_misuse``; parameters the model does not hold, ``stray_params``, and then the second loss's; the targets of
the first few, ``one_class_batches``); at the first updates only, the parameters the optimizer does not hold
(``unoptimized``), updates that find no gradient (``step_order``), parameters no gradient reaches (``cut_off``) or
unclipped gradients (``clip_order``), gradients carried into the next step (``zero_grad``) and units a constant
initialization keeps identical (``symmetric``); at the 20th update or the end of the run, what those found; every
64th update, the variables of the frames running the loop, for a running total of the loss kept with its graph
(``running_total``), the learning rates, for one decayed to nothing (``lr_collapse``), which gradients are exactly
zero (``stalled``), and the latest loss, for one a million times the first or ten times a uniform guess's
cross-entropy (``diverged``, the first at the end of the run too); at gradients reset with no update, whether any
optimizer stepped on them (``discarded_grads``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import torch

from . import eval_mode, running_total, symmetric
from .aftermath import flat_loss, say
from .clip_order import ClipOrder
from .cut_off import CutOff
from .discarded_grads import DiscardedGradients
from .diverged import Divergence
from .loss_misuse import misuse
from .lr_collapse import LrCollapse
from .one_class_batches import OneClassBatches
from .optimizer_call import SCALER_PROBE_STEPS
from .step_order import GradlessUpdates
from .stalled import StalledGradients
from .stop import listen_guarded
from .stray_params import StrayParams
from .unoptimized import Followed, Unoptimized
from .zero_grad import CHECKS, MissingZeroGrad


class SilentChecks:
    """One watch's: its model updated in eval mode, parameters it never updates, no zero_grad between steps."""

    def __init__(self, model: torch.nn.Module, line: Callable[[str | None], None]) -> None:
        self._line = line  # says a line of the watch's (nothing for None): parameters that never changed
        self.eval_said = False  # an update in eval mode was looked at (said, where the mode changes anything)
        self.total_said = False  # a running total kept with its graph was said (``running_total``)
        self._since = -1  # autograd's node number at the last look for one (-1: none yet)
        self._updates = 0  # the updates seen so far (up to the last early_update looks at)
        self._unoptimized = Unoptimized(Followed(lambda: self._updates))
        self._strays = StrayParams(model, say, Followed(lambda: self._updates))
        self._zero_grad = MissingZeroGrad(say)
        self._gradless = GradlessUpdates(say)
        self._cut_off = CutOff(say)  # parameters no gradient reaches (a .detach() in the forward)
        self._clip_order = ClipOrder(say)
        self._batches = OneClassBatches(say)
        self._rates = LrCollapse()  # a learning rate decayed to nothing
        self._stalled = StalledGradients()  # no weight matrix gets a non-zero gradient: the model stopped learning
        self._discards = DiscardedGradients(say)  # zero_grad() before each backward() of an accumulation
        self._losses = 0
        self._divergence = Divergence()  # a loss diverging while it stays finite
        self._wants_strays, self._wants_targets = False, True  # the losses still wanted
        self._stop_misuse: Any = listen_guarded(self._loss)

    def _loss(self, loss: torch.Tensor) -> None:
        """A loss handed to backward() while watched: the first's graph read once (before backward frees it), the
        second's when the first held parameters the model does not, the first few's targets (``one_class_batches``)."""
        self._losses += 1
        try:
            if self._losses == 1:
                self._divergence.first_loss(loss)
                try:
                    text = misuse(loss)
                    if text is not None:
                        say(f"tensor_dap: {text} (said once)")
                finally:
                    self._wants_strays = self._strays.first_loss(loss)
            elif self._wants_strays:
                self._wants_strays = False
                self._strays.second_loss(loss)
        finally:
            self._wants_targets = self._wants_targets and not self._batches.loss(loss)
            if not (self._wants_strays or self._wants_targets):
                self._stop_listening()

    def _stop_listening(self) -> None:
        stop, self._stop_misuse = self._stop_misuse, None
        if stop is not None:
            stop()

    def early_update(self, update: int, model: torch.nn.Module, optimizer: Any, params: list[torch.Tensor],
                     step: int, closure: bool) -> None:
        """The ``update``-th update the watch sees (0 the first) is about to run, as ``step`` (``closure``: one that
        computes its gradients inside ``step()``)."""
        if update == 0:
            self._unoptimized.first_update(model, optimizer)
            self._since = running_total.now()
            self._rates.first_update(optimizer)
        self._updates = update + 1
        self._gradless.updating(update, model, optimizer, params, closure)
        self._cut_off.updating(update, model, optimizer, params, closure)
        self._clip_order.updating(update, params)
        if update <= CHECKS:  # (the last one only tells what the one before noted)
            self._zero_grad.updating(params, step)
        if update == symmetric.AT:
            symmetric.say_once(model, say)
        if update == SCALER_PROBE_STEPS - 1:  # the last update looked at: a long run need not wait for its end
            self._unchanged(final=False)

    def in_eval_mode(self, model: torch.nn.Module, step: int, loop: Any = None) -> None:
        """``model`` is updated in eval mode at ``step``: said once (with a functional dropout the unchanged ``loop``'s
        capture saw off in an evaluation, where the model has no layer the mode changes)."""
        self.eval_said = True
        eval_mode.say_once(model, step, loop.evaluations.dropout_off if loop is not None else None)

    def now_and_then(self, step: int, optimizer: Any, params: list[torch.Tensor], model: torch.nn.Module,
                     losses: Sequence[Any] = ()) -> None:
        """Every ``running_total.EVERY`` updates: a running total of the loss kept with its graph since the last look
        (the first update, for the first), a learning rate decayed to nothing (``lr_collapse``), no weight matrix
        learning (``stalled``, with the latest of ``losses``), a loss diverging while finite (``diverged``) and one
        stuck at one exact value (``aftermath.flat_loss``), each said once."""
        if not self.total_said:
            text = running_total.kept_total(step, self._since) if self._since >= 0 else None
            self._since = running_total.now()
            if text is not None:
                self.total_said = True
                say(text)
        for text in (self._rates.look(optimizer, step), self._stalled.look(params, optimizer, step, model, losses)):
            if text is not None:
                say(text)
        self._diverging(losses, step)
        self._line(flat_loss(losses))  # a loss that stopped moving, said now rather than when the run ends

    def _diverging(self, losses: Sequence[Any], step: int | None) -> None:
        text = self._divergence.look(losses, step)
        if text is not None:
            say(text)

    def reset_unstepped(self, update: int, optimizer: Any) -> None:
        """The unchanged loop's gradients were reset with no update since a ``backward()`` (``update``: the next)."""
        self._discards.reset(update, optimizer)

    def at_end(self, losses: Sequence[Any] = ()) -> None:
        """The end of the run: the lines about a loss that never moved, parameters never updated and a diverging loss
        (the latest of ``losses``), if not said yet; nothing listens after."""
        self._line(flat_loss(losses))
        self._diverging(losses, None)
        self._discards.close()
        self._zero_grad.close()
        self._clip_order.close()
        self._stop_listening()
        self._unchanged(final=True)

    def _unchanged(self, final: bool) -> None:
        """Say the parameters followed since the first updates that never changed (each said once: those
        followed are let go)."""
        self._line(self._unoptimized.unchanged())
        self._line(self._strays.unchanged(final))
