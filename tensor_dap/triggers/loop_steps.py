"""The unchanged loop's steps, as ``watch`` counts them: which forwards and backwards make one step of
its optimizer, and the loss each step is reported with.

Every ``backward()`` of the program reaches every watch; a loss is a step's once it is seen to reach
the model's outputs (``LoopCapture.settle``). A step ends with the optimizer's update. One that ends
without (the gradients were reset first) is counted only where a ``GradScaler`` scales the losses: it
skipped an overflowing step, which is one of the run's steps. Without one, forwards and backwards with
no update of this optimizer are not its steps (a GAN's generator step runs through the discriminator;
a loop skipped a batch itself): they are not counted and their losses are not this model's history.

A loop with no ``torch.optim`` optimizer updates its parameters by hand after ``backward()`` (pytorch/
examples' word language model: ``p.data.add_(p.grad, alpha=-lr)``): until an optimizer is seen
stepping, each ``backward()`` is a step, checked as it returns (``_step_by_hand``).

A watch attached inside a running ``step(closure)`` (LBFGS's first step: ``attach`` finds the model when the
closure calls it) missed that step's pre-step hook, which wraps the closure; each evaluation of that closure is
checked as its ``backward()`` returns instead, until the update ends (``join_step``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import operator
from collections.abc import Iterator
from typing import Any, Callable

import torch

from ..dist import no_collectives
from ..state import kept
from .capture import StepContext, loss_of
from .forwards import loss_value, replay_forwards
from .loss_tap import listen, scaling
from .optimizer_call import param_ids

_isfinite = math.isfinite


class LoopSteps:
    """Mixed into ``watch``: the state it reads is the watch's own (see watch.__init__)."""

    _shared = False  # several optimizers update the model, each hooked (``add_optimizer``)

    def _backward_loss(self, loss: torch.Tensor) -> None:
        """A loss handed to ``backward()`` outside ``w.step`` with no capture (``rerun=False``): the unchanged
        loop's loss, for the reports. (A capture takes it itself: ``LoopCapture.backward_called``.) Inside
        ``w.step`` it is checked with the step's gradients, before the update: a loss that goes non-finite while
        every gradient stays finite (a batch whose targets are all ignored) is then caught in its own step."""
        if self._rerunning or self._replaying:
            return
        ctx = self._ctx
        if ctx is None:
            self._step_losses.append(loss_value(loss))
        elif not ctx.checked:
            self._running_loss = (ctx.index, loss.detach())
            self._guard(self._sentinel.observe_value, loss, ctx.index)

    def _take_loop_losses(self) -> None:
        """The unchanged loop's step loss into the history, one value a step: the mean of the losses the model
        returned (each micro-batch's, as nanoGPT's model returns them; also watched by the sentinel), else the sum
        of the losses given to ``backward()`` in this step (accumulated micro-batches add up, as their gradients
        do: divided by their count first, as such loops do, that is the same mean). Kept as ``loss_value`` keeps
        them: no device read before a report."""
        loop = self._loop
        if loop is not None:
            loop.settle()
        losses = self._step_losses
        loss = self._running_step_loss()
        returned = loop.losses if loop is not None else None
        if returned:
            mean = returned[0] if len(returned) == 1 else self._guard(_mean, returned)
            if mean is None:  # (could not be added up: the last one stands for the step)
                mean = returned[-1]
            self._history.append(mean)
            self._last_loss = (self.step_count, mean)
            self._guard(self._sentinel.observe_value, mean, self.step_count)
            loop.losses = []
        elif loss is not None:
            self._history.append(loss)
            self._last_loss = (self.step_count, loss)
            self._observe_loss(loss, self.step_count)
        elif self._noted is not None:
            self._history.append(self._noted)
        losses.clear()
        self._noted = None

    def _plain_update(self) -> bool:
        """An unchanged loop's update with nothing unusual about it: its loss into the history, the check,
        the step's end. That is what ``_take_loop_losses`` and ``_after_update`` do around ``_check``, written
        out in the fewest lines because it runs in every step of a plain loop, where each line of Python costs
        ~0.3 µs (the caches are cold after the step's kernels). False, with nothing done but settling the
        last loss, when the step needs the general path (several or no losses, a loss the model returned,
        a break_if's loss, ``every`` > 1)."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        loop, losses, sentinel = self._loop, self._step_losses, self._sentinel
        if loop is not None:
            if loop.pending is not None:
                loop.settle()
            if loop.losses:
                return False
        if len(losses) != 1 or self._noted is not None or sentinel.every != 1:
            return False
        index = self.step_count
        loss = losses.pop()
        self._history.append(loss)
        self._last_loss = (index, loss)
        if type(loss) is not float or not _isfinite(loss):  # (a finite loss on the CPU, the common case: nothing)
            self._observe_loss(loss, index)
        self._guard(self._check, index, None)
        self.step_count = index + 1
        self._watched += 1
        if loop is not None:
            loop.stepped()
            loop.enabled = True
        return True

    def _running_step_loss(self) -> Any:
        """The loss of the unchanged loop's step not ended yet: the losses handed to backward() in it, added up as
        their gradients are (accumulated micro-batches); None before any."""
        losses = self._step_losses
        return (losses[0] if len(losses) == 1 else self._guard(summed, losses)) if losses else None

    def _observe_loss(self, loss: Any, index: int) -> None:
        """The step's loss into the sentinel: a loss can go non-finite while every gradient stays finite (a squared
        error that overflows; pytorch/examples' regression with ``mse_loss`` trained on inf for 8 steps)."""
        if type(loss) is float:
            self._sentinel.observe_number(loss, index)
        else:
            self._guard(self._sentinel.observe_value, loss, index)

    def add_optimizer(self, optimizer: Any) -> None:
        """Another optimizer updates this model too (the speedruns' Muon for its matrices and AdamW for the rest; a
        ``SparseAdam`` for its embedding): its update is checked as well, once a step, in the hook of whichever of
        them steps first (``_stepped_already``)."""
        self._shared = True
        self._handles.append(optimizer.register_step_pre_hook(self._before_update))

    def _stepped_already(self, optimizer: Any) -> bool:
        """True when this update needs no check of its own: the backward() before it checked and ended this step (a
        loop updating by hand until this optimizer stepped: ``_optimizer_found``), or another optimizer of the
        model's did in its hook, this step (``add_optimizer``: the unchanged loop's capture tells; with none, no loss
        was handed to backward() since that hook took the step's)."""
        if self._untap_done is not None:
            return self._optimizer_found(optimizer)
        if self._ctx is not None:  # a step handed to w.step: its first update checked it
            return self._ctx.checked
        return self._loop.between_steps if self._loop is not None else not self._step_losses

    def _optimizer_found(self, optimizer: Any) -> bool:
        """A torch.optim optimizer updating the model steps (none was given): it is the watch's optimizer from now
        on, checked in its pre-step hook. True when the backward() before it already checked and counted this
        step (``_step_by_hand``)."""
        if self._param_ids.isdisjoint(param_ids(optimizer)):
            return False  # another model's optimizer
        assert self._untap_done is not None
        self._untap_done()
        self._untap_done = None
        self.optimizer = self._stepper = optimizer  # its post-step hook, its state in bundles, its lr in reports
        return self._by_hand and self._ctx is None

    def _backward_done(self, loss: torch.Tensor) -> None:
        """A backward() returned and no torch.optim optimizer has stepped: a loop that updates its
        parameters by hand does so next, so its gradients are checked now, before that update."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        if self._ctx is None and not (self._rerunning or self._replaying):
            self._guard(self._step_by_hand)

    def _step_by_hand(self) -> None:
        """Without torch.optim each backward() is a step: its loss into the history, the check, its end
        (micro-batches accumulated by hand are then steps of their own, each checked)."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        index = self.step_count
        self._take_loop_losses()
        self._guard(self._check, index, None)
        self._by_hand = True
        self._after_update(None, (), {})

    def _check_accumulated(self, optimizer: Any) -> None:
        """An optimizer evaluating a closure after micro-batches the loop ran itself (Lightning's
        ``accumulate_grad_batches``: every micro-batch but the last runs outside ``step()``). Their gradients are
        checked before the closure adds to them: a failure is re-run from the capture, which holds those
        micro-batches (re-running the closure would not reproduce it), and reported with their loss. Otherwise their
        losses are kept, added to the closure's: the step's loss (``_closure_ends``)."""
        index = self.step_count
        if self._sentinel.check_params(self._groups, index):
            self._take_loop_losses()
            self._read_and_fire(index, self._loop_context(optimizer))
        self._noted = None

    def _handed_over(self) -> StepContext | None:
        """The last ``w.step``, when an update runs outside any: a step function that stops before
        ``optimizer.step()``, which the loop calls after it. That update is that step's: checked before it with the
        step re-runnable, and not counted as a step of its own."""
        last = self._last_ctx
        if (self._loop is None and last is not None and not last.checked and not last.updated
                and last.index == self.step_count - 1):
            self._adopted = last
            return last
        return None

    def join_step(self, closure: Callable[[], Any]) -> None:
        """Attached inside a running ``optimizer.step(closure)``: check each evaluation of ``closure`` in this step as
        its backward() returns (before the optimizer uses its gradients), as the pre-step hook would have had it
        wrapped; a failing one is re-run through ``closure``, so a NaN in the loss is named too."""
        if self._joined is None and self._loop is not None:
            self._joined = (closure, listen(self._joined_backward, done=True))
            self._after_hook()  # the step's end: the post-step hook, which also ends the join

    def _joined_backward(self, loss: torch.Tensor) -> None:
        if self._joined is None or self._rerunning or self._replaying:
            return
        index, loop = self.step_count, self._loop
        self._take_loop_losses()  # its loss into the history and the sentinel
        ctx = self._loop_context()
        if ctx is not None:  # this evaluation, from its forward's start: re-run through the closure itself
            ctx = dataclasses.replace(ctx, fn=self._joined[0], forwards=None, kept_forwards=ctx.forwards, closure=True)
        self._guard(self._check, index, ctx)
        if loop is not None:
            loop.stepped()  # the next evaluation's forward opens a capture of its own (LBFGS moves the parameters)

    def _end_join(self) -> None:
        if self._joined is not None:
            self._joined[1]()
            self._joined = None

    def _loop_context(self, optimizer: Any = None) -> StepContext | None:
        """The unchanged loop's step as a context to re-run (its forwards and backwards, replayed), if it can be."""
        loop = self._loop
        if loop is None or not loop.replayable or loop.start is None:
            return None
        loop.settle()  # the last loss handed to backward() is its forward's before the forwards are re-run
        forwards = loop.step_forwards()
        return StepContext(self.step_count, lambda: replay_forwards(self._inner, forwards), (), {}, forwards[0].rng,
                           loop.start, checked=True, optimizer=optimizer or self._stepper, forwards=forwards,
                           updated=loop.updated)

    def _closure_begins(self) -> int:
        """An evaluation of the optimizer's closure begins: it opens a capture of its own (LBFGS moves the parameters
        between evaluations; micro-batches the loop ran itself before it are checked already: ``_check_accumulated``).
        How many of this step's losses came before it."""
        if self._loop is not None:
            self._loop.stepped()
        return len(self._step_losses)

    def _closure_ends(self, ctx: StepContext, loss: Any, before: int) -> Any:
        """An evaluation of the closure returned ``loss``: ``ctx`` keeps the model's forwards in it, which its bundle
        replays (another process's closure would hold another batch: Lightning's). The step's loss: the closure's,
        added to the losses of the micro-batches before it, as their gradients add up (Lightning's
        ``accumulate_grad_batches``); the capture's own record of the closure's loss is let go."""
        loop = self._loop
        if loop is not None:
            captured = self._loop_context()
            ctx.kept_forwards = captured.forwards if captured is not None else None
            loop.losses = []
            loop.stepped()
        value = loss_of(loss)
        earlier = self._step_losses[:before]
        self._step_losses.clear()
        return summed([*earlier, value]) if earlier and value is not None else value

    def _loop_unstepped(self) -> None:
        """The unchanged loop reset gradients with no update since its last backward: a step a GradScaler
        skipped, or not a step of this optimizer at all (see the module's docstring)."""
        if self._rerunning or self._replaying:
            return
        if self.scaler is None and not scaling():
            self._guard(self._silent.reset_unstepped, self.step_count, self.optimizer)
            if self._loop is not None:
                self._loop.settle()
                self._loop.losses = []
            self._step_losses.clear()
            self._noted = None
            return
        self._take_loop_losses()
        self._unstepped(self.step_count, self._loop_context())
        self.step_count += 1
        self._watched += 1

    def step_inputs(self) -> list[tuple[Any, Any]]:
        """(the arguments, the line that called the model) of each forward of this step (the unchanged loop's), or
        of the ``w.step`` running (no line)."""
        if self._loop is not None:
            return [((f.args, f.kwargs), f.call) for f in self._loop.forwards]
        return [((self._ctx.args, self._ctx.kwargs), None)] if self._ctx is not None else []

    def rerun_for(self, loss: torch.Tensor, forward: Callable[[torch.nn.Module, Any], Any],
                  step: Callable[[StepContext], Any]) -> bool:
        """Run again what made ``loss``: ``forward(model, f)`` on the unchanged loop's forward whose loss it is, or
        ``step(ctx)`` on the ``w.step`` running now; with this watch's captures off, its update refused
        (``_before_update``), and its buffers, gradients and RNG states (and parameters, where no optimizer was seen
        updating them) put back after. False when neither made ``loss`` or a re-run is already running."""
        loop, ctx = self._loop, self._ctx
        f = next((g for g in reversed(loop.forwards) if g.loss_tensor is loss), None) if loop is not None else None
        if self._rerunning or (f is None and ctx is None):
            return False
        with kept(self._params, self._buffers, params_too=f is None and self._mode != "optimizer"), self._alone():
            forward(loop.model, f) if f is not None else step(ctx)
        return True

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        """While watch runs the program's code again itself: ``_rerunning`` (its update is refused:
        ``_before_update``), the unchanged loop's capture off (it keeps none of the re-run) and DDP's collectives
        off (each rank re-runs alone)."""
        loop = self._loop
        capturing = loop is not None and loop.enabled
        self._rerunning = True
        if capturing:
            loop.enabled = False
        try:
            with no_collectives(self.model):
                yield
        finally:
            self._rerunning = False
            if capturing:
                loop.enabled = True


def summed(losses: list[torch.Tensor]) -> torch.Tensor:
    """A step's losses (accumulated micro-batches), added up as their gradients are."""
    return functools.reduce(operator.add, losses)


def _mean(losses: list[torch.Tensor]) -> torch.Tensor:
    """The mean of the losses a model returned in one step (its micro-batches'), on their device: no read."""
    return summed(losses) / len(losses)
