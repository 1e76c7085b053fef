"""A learning rate decayed to nothing: a scheduler meant for epochs stepped after every batch.

``StepLR(optimizer, step_size=1, gamma=0.7)`` (pytorch/examples' MNIST and siamese network) stepped inside the batch
loop instead of after it multiplies the rate by 0.7 at every update: 40 updates later it is a millionth of where it
began, and the model stops learning with no error while the loss just flattens. The watch keeps each parameter
group's rate at the first update, and every ``running_total.EVERY`` updates reads them again (a float per group); a
rate below ``FRACTION`` of the largest seen, at two looks in a row (a schedule that anneals to 0 at the run's very end
is there for a few updates only), is said once, with the scheduler that set it and how often it stepped.
"""

from __future__ import annotations

import gc
from typing import Any

from ..format import fmt_num
from .optimizer_call import readable_rates

FRACTION = 1e-6  # of the largest rate a group had: below it, an update no longer moves the weights
_SHOWN = (int, float, bool)


class LrCollapse:
    """The rates of one optimizer's parameter groups, looked at now and then."""

    def __init__(self) -> None:
        self._largest: list[float] = []
        self._low = False  # the last look found a rate below FRACTION of its largest
        self.said = False

    def first_update(self, optimizer: Any) -> None:
        self._largest = readable_rates(optimizer)

    def look(self, optimizer: Any, step: int) -> str | None:
        """The line to say when a group's rate collapsed at this look and the last (at the update of ``step``: as many
        updates were made before it)."""
        if self.said or optimizer is None:
            return None
        rates = readable_rates(optimizer)
        largest = [max(a, b) for a, b in zip(rates, self._largest)] + rates[len(self._largest):]
        self._largest = largest
        low = next(((r, top) for r, top in zip(rates, largest) if top > 0 and 0 <= r < top * FRACTION), None)
        was_low, self._low = self._low, low is not None
        if low is None or not was_low:
            return None
        self.said = True
        rate, top = low
        scheduler = _scheduler_of(optimizer)
        if scheduler is None:
            why = "something lowers it at every update (a learning-rate scheduler stepped in the batch loop?)"
        else:
            stepped = int(getattr(scheduler, "last_epoch", -1))
            times = f"stepped {stepped} times in {step} updates" if stepped >= 0 else "stepped"
            why = (f"{_shown(scheduler)} {times}: a scheduler meant for epochs called in the batch loop? Call "
                   f"scheduler.step() once per epoch, after the batch loop, or size it in updates")
        return (f"tensor_dap: the learning rate is {fmt_num(rate)} at the update of step {step}, under a millionth of "
                f"the {fmt_num(top)} it had, so updates no longer move the weights and the loss just flattens; "
                f"{why} (said once)")


def _scheduler_of(optimizer: Any) -> Any:
    """A learning-rate scheduler holding ``optimizer`` (a walk of the objects referring to it: once, when said)."""
    try:
        from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

        kinds = (LRScheduler, ReduceLROnPlateau)
        return next((r for r in gc.get_referrers(optimizer) if isinstance(r, kinds)), None)
    except Exception:  # noqa: BLE001 - not found: the line says so
        return None


def _shown(scheduler: Any) -> str:
    """``StepLR(step_size=1, gamma=0.7)``: its class and its own settings (scalars, 4 at most)."""
    settings = [f"{k}={v!r}" for k, v in vars(scheduler).items()
                if not k.startswith("_") and k not in ("last_epoch", "verbose") and type(v) in _SHOWN][:4]
    return f"{type(scheduler).__name__}({', '.join(settings)})"
