"""``tensor-dap run --loss-above X``: a training step's loss, compared once, before its update.

A loop that accumulates gradients hands ``backward()`` one micro-batch loss at a time, divided by their
count (nanoGPT divides by ``gradient_accumulation_steps``, 40 for GPT-2; HF's Trainer and Lightning do the
same): compared one by one, they stay far below a threshold set on the loss the run prints. So the losses
handed to ``backward()`` since the last update are added up (the micro-batches' mean, as their gradients
add up) and compared in the optimizer's pre-step hook, before the update. Until an optimizer has stepped
once (a loop updating by hand never does), and inside a step whose closure computes the loss (LBFGS), each
loss is compared as it comes; the first update then compares its micro-batches added up too (a single loss
again, below the threshold: the step losses' history, which a report's diagnosis reads, starts at step 0). A step a
GradScaler skipped has no update: only the losses of as many ``backward()`` calls as the last updated step
had are kept, so a skipped step's losses do not add to the next one's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from typing import Any, Callable, Optional

from .break_if import Site, check
from .loop_steps import summed
from .optimizer_call import closure_of
from .stop import guarded

WHO = "tensor_dap run"  # (in the warning of a loss check of ours that failed)
FIRST_STEP_KEPT = 4096  # losses kept before the first update, to add up should an optimizer step


class StepLoss:
    """The threshold's state between ``AutoTriggers``' hooks; ``steps()``: the updates so far."""

    def __init__(self, above: float, steps: Callable[[], int], on: str,
                 ranks: Optional[Collection[int]]) -> None:
        self.above, self._steps, self.on, self.ranks = above, steps, on, ranks
        self._losses: deque[Any] = deque()
        self._backwards = 0  # backward() calls since the last update
        self._accumulating = False  # an optimizer has stepped: losses add up to the step's
        self._closure = False  # this step's loss comes from its closure, after the pre-step hook
        self._fired = False  # a loss before the first update was above the threshold on its own
        self._each, self._stepped = Site(), Site()  # losses as backward() gets them; steps' losses, added up

    def backward(self, loss: Any, step: int) -> None:
        """A loss handed to ``backward()``: kept for the step's, or compared now (and, before the first update,
        kept too: should an optimizer step, that step's micro-batches are compared together as well)."""
        self._backwards += 1
        if self._closure:
            guarded(WHO, self._compare, loss, step)
            return
        if not self._accumulating:
            self._fired = self._fired or guarded(WHO, self._compare, loss, step)
            if len(self._losses) >= FIRST_STEP_KEPT:
                return  # (a loop updating by hand: none of these will be added up)
        self._losses.append(loss.detach() if hasattr(loss, "detach") else loss)

    def before_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The optimizer's pre-step hook (every optimizer's): the step's loss, compared before its update."""
        losses = list(self._losses)
        self._losses.clear()
        self._closure = closure_of(args, kwargs) is not None
        if self._closure or (not self._accumulating and self._fired):
            return  # (compared as they came)
        if losses:  # (the first update's single loss again: below the threshold, it starts the steps' history)
            guarded(WHO, lambda: self._compare_step(added_up(losses), self._steps(), optimizer))

    def after_update(self) -> None:
        if self._backwards and not self._closure:
            self._losses = deque(maxlen=self._backwards)
            self._accumulating = True
        self._backwards, self._closure = 0, False

    def _compare(self, loss: Any, step: int) -> bool:
        """One loss as ``backward()`` got it (its own history: such losses)."""
        return check(loss, self._each, above=self.above, nan=False, step=step, on=self.on, ranks=self.ranks)

    def _compare_step(self, loss: float, step: int, optimizer: Any) -> bool:
        """A step's loss, its micro-batches added up (a history of step losses, not mixed with the above), before
        ``optimizer``'s update: a report carries its learning rates."""
        return check(loss, self._stepped, above=self.above, nan=False, step=step, on=self.on, ranks=self.ranks,
                     optimizer=optimizer)


def added_up(losses: list[Any]) -> float:
    """The step's loss, its micro-batches added up as the watch adds them (``loop_steps.summed``: on their device,
    then one host read, where a read each would stall the step as many times); read one by one where they cannot
    be added there (on several devices)."""
    try:
        return float(summed(losses))
    except (RuntimeError, TypeError, ValueError):  # another device among them, a non-scalar: read each
        return math.fsum(float(v) for v in losses)
