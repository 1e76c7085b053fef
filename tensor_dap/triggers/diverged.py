"""A loss that grew a millionfold and is still finite: a run diverging where nothing overflows.

pytorch/examples' time-sequence LSTM trains in float64 with LBFGS; at a rate 100 times its 0.8 the loss goes from
0.5 to 1e69 within the first step's 20 evaluations and to 1e225 by the third, and float64 does not overflow there:
no NaN, no Inf, no trigger, and the run ends as if it had trained. (In float32 or bfloat16 the same run overflows
within a few steps and the non-finite trigger names it, with this diagnosis.) The watch keeps the run's first loss;
at each look every ``running_total.EVERY`` updates and at the end of the run, a latest loss above ``GROWTH`` times it
(and above ``GROWTH`` itself) is said once. Losses that start at or below 0 (a log-likelihood, a policy gradient)
are not compared.
"""

from __future__ import annotations

import math
from typing import Any

from ..format import fmt_num

GROWTH = 1e6  # no loss that trains grows this much from its first value (nor past it from one under 1: a loss that
# starts near 0, an auxiliary term alone in a warm-up, may grow a millionfold and be fine); a diverging one passes it


def diverged(first: Any, latest: Any) -> str | None:
    """The line to say when ``latest`` (a value or a 0-dim tensor, read here) is over ``GROWTH`` times ``first``, and
    over ``GROWTH``."""
    try:
        start, now = float(first), float(latest)
    except Exception:  # noqa: BLE001 - a device that cannot be read any more: nothing said
        return None
    if not (math.isfinite(start) and math.isfinite(now)) or start <= 0 or now <= GROWTH * max(start, 1.0):
        return None
    return (f"tensor_dap: the loss grew from {fmt_num(start)} at the first step to {fmt_num(now)} "
            f"({fmt_num(now / start)} times) and is still finite: the training diverges (in float64 it may never "
            f"overflow); lower the learning rate or clip gradients "
            f"(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) (said once)")
