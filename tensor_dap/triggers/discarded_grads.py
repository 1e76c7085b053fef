"""Gradients thrown away before any update: ``optimizer.zero_grad()`` at the top of a gradient-accumulation loop.

::

    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()              # meant after the step
        (loss_fn(model(x), y) / 4).backward()
        if (i + 1) % 4 == 0:
            optimizer.step()

runs with no error and a loss that falls: every update uses the last micro-batch's gradients only, a quarter of
the batch it was sized for. The unchanged loop's capture already sees gradients reset with no update since a
``backward()`` (``LoopCapture``: a parameter's ``.grad`` gone, as ``zero_grad(set_to_none=True)``, torch's default,
leaves it). Such a reset is a discard when no optimizer at all stepped since the watched optimizer's own last step
or the last reset: a GAN's discriminator sees its gradients from the generator's loss reset each iteration too, but
after the generator's optimizer stepped on them. Counted from the first reset on (a global optimizer post-step
hook, put on then: a loop that never resets without an update pays nothing); discards before two updates in a row
are said once, at the third such interval (the first one's count misses the reset that began the counting).
"""

from __future__ import annotations

from typing import Any, Callable


class DiscardedGradients:
    """One watch's: the resets with no update, and the optimizer steps between them."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._mine: Any = None  # the watched optimizer
        self._others = 0  # steps of other optimizers since the hook was put on
        self._mark = 0  # ``_others`` at the watched optimizer's last step or the last reset (set when counting starts)
        self._counts: dict[int, int] = {}  # the update each discard came before -> how many (the last two)
        self._first = 0  # the update the first reset came before: its count misses that reset
        self._handle: Any = None
        self.done = False

    def reset(self, update: int, optimizer: Any) -> None:
        """Gradients were reset with no update since a ``backward()``; ``update``: the watched optimizer's next."""
        if self.done or optimizer is None:
            return
        if self._handle is None:  # the first: from now on, count
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._mine, self._first = optimizer, update
            self._handle = register_optimizer_step_post_hook(self._stepped)
            self._mark = self._others
            return
        discarded, self._mark = self._others == self._mark, self._others
        if not discarded:
            return
        self._counts[update] = self._counts.get(update, 0) + 1
        before = self._counts.get(update - 1) if update - 1 > self._first else None  # (a whole interval's count)
        if before:
            self.done = True
            self.close()
            self._say(f"tensor_dap: zero_grad() reset the gradients of {before} backward() call"
                      f"{'s' if before > 1 else ''} before the update of step {update - 1} (and again before step "
                      f"{update}) with no optimizer step after them, so each update uses the last backward()'s "
                      f"gradients only: gradient accumulation with zero_grad() before every backward()? Call "
                      f"optimizer.zero_grad() right after optimizer.step() (said once)")
        for old in [k for k in self._counts if k < update - 1]:
            del self._counts[old]

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if optimizer is self._mine:
            self._mark = self._others
        else:
            self._others += 1

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()
