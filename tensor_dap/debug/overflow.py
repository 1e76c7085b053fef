"""What "OverflowError: math range error" at a logging line means, in the crash report.

Language-model scripts log a perplexity, ``math.exp(loss)``; pytorch/examples' word-language model given
``--use-optimizer`` keeps its SGD rate of 20 for AdamW, the loss climbs to 2110, and the run dies at its logging line
with Python's "math range error", naming no value. The failing frame still holds what the line used: the floats
above what ``exp`` can take (709.78) are named, with what such a loss means.
"""

from __future__ import annotations

import math
from typing import Any

from ..format import fmt_num
from .frames import failing_frame
from .line_values import failing_line, named_values

RANGE = "math range error"  # math.exp's (and math.pow's: a line with no exp is left alone)
EXP_MAX = math.log(1.7976931348623157e308)  # 709.78: the largest x whose exp is a float
MAX_NAMED = 3


def advice(exc: BaseException, tb: Any) -> str:
    """The names on the failing line holding values exp cannot take, and what a loss that large means; '' for any
    other error."""
    try:
        if not isinstance(exc, OverflowError) or RANGE not in str(exc):
            return ""
        frame, lineno = failing_frame(tb)
        line = failing_line(frame, lineno)
        if "exp" not in line:
            return ""
        large = [(name, number) for name, value in named_values(frame, line)
                 if (number := _number(value)) is not None and abs(number) > EXP_MAX][:MAX_NAMED]
    except Exception:  # noqa: BLE001 - advice must never replace the program's own error
        return ""
    if large:
        held = ", ".join(f"{name} = {fmt_num(value)}" for name, value in large)
        what = f"{held} on this line, where exp() of anything above {EXP_MAX:.2f} overflows a float"
    else:
        what = f"a value computed on this line is above {EXP_MAX:.2f}, where exp() overflows a float"
    return (f"tensor_dap: {what}. Taken of a loss (a perplexity), a loss that large means the training diverged: "
            f"lower the learning rate (a rate tuned for SGD handed to Adam?) or clip gradients")


def _number(value: Any) -> float | None:
    """A Python number or a one-element tensor, as a float; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        import torch

        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_meta:
            return float(value.detach().cpu())
    except Exception:  # noqa: BLE001 - not a readable number
        return None
    return None
