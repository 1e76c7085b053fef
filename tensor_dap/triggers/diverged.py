"""A loss that diverges and stays finite: no NaN, no Inf, no trigger, and the run goes on.

Two ways it happens. pytorch/examples' time-sequence LSTM trains in float64 with LBFGS; at a rate 100 times its 0.8
the loss goes from 0.5 to 1e69 within the first step's 20 evaluations and to 1e225 by the third, and float64 does not
overflow there. Its word-language model given ``--use-optimizer`` keeps its SGD rate of 20 for AdamW: the
cross-entropy climbs from 6.2 (a uniform guess over 501 words) to 2110 with finite logits, until the logging line's
``math.exp`` of it crashes. The watch keeps the run's first loss and, when that loss is a mean cross-entropy itself
(its node is ``nll_loss``'s), what a uniform guess over its classes scores (ln C). At each look every
``running_total.EVERY`` updates and at the end of the run the latest loss is said once when it is over ``GROWTH``
times the first (and over ``GROWTH`` itself), or when the median of the last ``RECENT`` losses is over
``CHANCE_FACTOR`` times that guess (a passing spike does not move a median: makemore at a rate of 3 sat at a
cross-entropy of 300-1200 from its 10th update and was said at its first look, update 64).
Losses that start at or below 0 (a log-likelihood, a policy gradient) are not compared with the first.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..format import fmt_num
from .aftermath import latest_loss
from .fixes import DIVERGENCE_FIX

GROWTH = 1e6  # no loss that trains grows this much from its first value (nor past it from one under 1: a loss that
# starts near 0, an auxiliary term alone in a warm-up, may grow a millionfold and be fine); a diverging one passes it
CHANCE_FACTOR = 10  # a mean cross-entropy this many times ln C gives the true class under C^-10 on average
RECENT = 16  # the latest losses whose median is compared with a uniform guess
_NLL = ("NllLossBackward0", "NllLoss2DBackward0")
_MEAN = 1  # nll_loss's reduction code for 'mean'


class Divergence:
    """The run's first loss and its chance level, compared with the latest loss now and then."""

    def __init__(self) -> None:
        self._first: Any = None  # detached: read at a look, so no sync on a device now
        self._classes = 0  # the classes of a first loss that is a mean cross-entropy itself (0: it is not)
        self.said = False

    def first_loss(self, loss: Any) -> None:
        """The first loss handed to backward(), its graph still whole."""
        self._first = loss.detach().clone()
        self._classes = _classes(loss)

    def look(self, losses: Any, step: int | None) -> str | None:
        """The line to say about the latest of ``losses`` (at the update of ``step``; None: the end of the run)."""
        now = latest_loss(losses) if not self.said and self._first is not None else None
        if now is None:
            return None
        try:
            start = float(self._first)
        except Exception:  # noqa: BLE001 - a device that cannot be read any more: nothing said
            return None
        text = _grown(start, now) or self._above_chance(now, losses, step)
        self.said = text is not None
        return text

    def _above_chance(self, now: float, losses: Any, step: int | None) -> str | None:
        """The median of the latest losses over CHANCE_FACTOR times a uniform guess (``step`` None: the end)."""
        if not self._classes or not math.isfinite(now):
            return None
        guess = math.log(self._classes)
        recent = _median_of_recent(losses) if now > CHANCE_FACTOR * guess else None
        if recent is None or recent[0] <= CHANCE_FACTOR * guess:
            return None
        median, count = recent
        when = f"at the update of step {step}" if step is not None else "at the end of the run"
        over = f" (a median of {fmt_num(median)} over its last {count} steps)" if count > 1 else ""
        return (f"tensor_dap: the loss is {fmt_num(now)} {when}{over}, more than {CHANCE_FACTOR} times the "
                f"{fmt_num(guess)} of a uniform guess over its {self._classes} classes: the model is confidently "
                f"wrong, so the training diverged while the loss stays finite; {DIVERGENCE_FIX} (said once)")


def _median_of_recent(losses: Any) -> tuple[float, int] | None:
    """(the median of the last RECENT losses, how many), read here (values, or 0-dim tensors: one read for all of
    them); None where they cannot be read."""
    import torch

    try:
        recent = list(losses)[-RECENT:]  # (a watch's history is a deque: no slices)
        tensors = [v for v in recent if isinstance(v, torch.Tensor)]
        try:
            values = torch.stack([v.detach().float().reshape(()) for v in tensors]).tolist() if tensors else []
        except RuntimeError:  # on several devices: one read each
            values = [float(v) for v in tensors]
        read = iter(values)
        numbers = [next(read) if isinstance(v, torch.Tensor) else float(v) for v in recent]
    except Exception:  # noqa: BLE001 - a device that cannot be read any more: nothing said
        return None
    return (statistics.median(numbers), len(numbers)) if numbers else None


def _grown(start: float, now: float) -> str | None:
    if not (math.isfinite(start) and math.isfinite(now)) or start <= 0 or now <= GROWTH * max(start, 1.0):
        return None
    return (f"tensor_dap: the loss grew from {fmt_num(start)} at the first step to {fmt_num(now)} "
            f"({fmt_num(now / start)} times) and is still finite: the training diverges (in float64 it may never "
            f"overflow); {DIVERGENCE_FIX} (said once)")


def _classes(loss: Any) -> int:
    """C, when ``loss`` is itself a mean ``nll_loss`` (``cross_entropy``) over C >= 2 classes; else 0."""
    try:
        node = loss.grad_fn
        if node is None or node.name() not in _NLL or int(node._saved_reduction) != _MEAN:
            return 0
        scores = node._saved_self
        classes = int(scores.shape[1] if scores.dim() >= 2 else scores.shape[0])
        return classes if classes >= 2 else 0
    except Exception:  # noqa: BLE001 - a graph of another kind: no chance level
        return 0
