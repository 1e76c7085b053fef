"""Who wrote a parameter found non-finite before a step: the optimizer's last update, or code between steps.

watch checks every gradient before each update, so a parameter that is NaN at the start of a step was
written after the last check: by that update, or by the user's code between ``optimizer.step()`` and the
next forward (a max-norm constraint ``w / w.norm()`` on a zero row, an EMA, ``load_state_dict`` of a bad
checkpoint). An update is ``p - lr * u`` where ``u`` comes from finite gradients and the optimizer's
state; with that state and the group's hyperparameters finite (and a non-zero ``eps`` where there is one,
Adam's ``m / (sqrt(v) + eps)``), ``u`` is finite, and a finite step gives no NaN (an Inf can be an
overflow of huge values, so only a NaN rules the update out). An ``eps`` is non-zero in the parameter's own dtype
or not at all: Adam's default 1e-8 is 0 in float16, where a gradient of 0 (an embedding row of a token not in the
batch) makes ``0 / 0`` and one below ~2e-4 squares to 0 (``m / 0``). Read only when a trigger fires.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .fixes import DIAGNOSES
from .finite import kind_of, max_abs

OVERFLOW_MARGIN = 1e-3  # an Inf is ruled out as the update's overflow while everything it read stays below this share
# of the dtype's largest value
OUTSIDE_UPDATE = ("the last update cannot have written a NaN (the gradients it used were finite, and so are the "
                  "optimizer's state for it and its hyperparameters): code between optimizer.step() and this "
                  "forward did (a weight constraint such as w / w.norm() of a zero row, an EMA, load_state_dict)")


def update_ruled_out(optimizer: Any, p: torch.Tensor) -> str | None:
    """Why ``optimizer``'s update cannot have made the NaN/Inf in ``p`` (see above); None when it can, or when that
    cannot be told (an optimizer that is not torch.optim's, ``p`` not among its parameters)."""
    try:
        group = _group_of(optimizer, p)
        if group is None or group.get("eps", 1) == 0 or _vanishing(group, p) is not None:
            return None
        hyper = [v for k, v in group.items() if k != "params"]
        state = optimizer.state.get(p, {})
        if not all(_finite(v) for v in hyper + list(state.values())):
            return None
        if kind_of(p.detach()) == "nan":
            return OUTSIDE_UPDATE
        return _no_overflow(group, p.detach(), [t for k, t in state.items() if isinstance(t, torch.Tensor)
                                                and k != "step"])  # (Adam's count of steps: no magnitude)
    except Exception:  # noqa: BLE001 - an unusual optimizer: nothing can be said
        return None


def _no_overflow(group: Any, p: torch.Tensor, state: list[torch.Tensor]) -> str | None:
    """An Inf from finite gradients, state and hyperparameters is an overflow past the dtype's largest value: ruled
    out where the learning rate is at most 1 and the parameter's finite values and its optimizer state are all far
    below that value (an update ``lr * u`` then cannot take a value of that scale past it). Said as likely, not
    certain: a value that was itself near the largest, every other staying small, is what this cannot tell."""
    lr = float(group.get("lr", math.inf))
    largest = torch.finfo(p.dtype).max
    values, kept = max_abs([p]), max_abs(state) or 0.0
    if lr > 1 or max(values or 0.0, kept) > largest * OVERFLOW_MARGIN:
        return None
    held = "no finite value left in the parameter" if values is None else f"its other values at most {values:.3g}"
    had = f"its state for it at most {kept:.3g}" if state else "no state kept for it"
    return (f"the last update is unlikely to have written this Inf: from finite gradients, optimizer state and "
            f"hyperparameters it could only overflow past {largest:.3g} ({str(p.dtype).replace('torch.', '')}'s "
            f"largest), with lr {lr:.3g}, {had} and {held}: code between optimizer.step() and this forward likely "
            f"wrote it (a weight constraint dividing by a norm or scale of 0, an EMA, load_state_dict)")


def vanishing_eps(optimizer: Any, p: torch.Tensor) -> float | None:
    """The ``eps`` of ``p``'s group when it is non-zero but rounds to 0 in ``p``'s dtype, where the update computes
    (not in a fused update, which computes in float32); else None."""
    try:
        group = _group_of(optimizer, p)
        return _vanishing(group, p) if group is not None else None
    except Exception:  # noqa: BLE001 - an unusual optimizer: nothing can be said
        return None


def _group_of(optimizer: Any, p: torch.Tensor) -> Any:
    """The parameter group holding ``p`` (by identity), or None."""
    return next((g for g in optimizer.param_groups if any(q is p for q in g["params"])), None)


def _vanishing(group: Any, p: torch.Tensor) -> float | None:
    eps = group.get("eps")
    if not isinstance(eps, float) or eps == 0 or group.get("fused") or not p.is_floating_point():
        return None
    return eps if float(torch.tensor(eps, dtype=p.dtype)) == 0 else None


def update_diagnosis(optimizer: Any, p: torch.Tensor, checked: bool = False) -> str | None:
    """Why the update itself wrote the NaN in ``p``, with the fix, when a rule says so (an ``eps`` lost in ``p``'s
    dtype; with ``checked``, finite gradients, a NaN the optimizer's state held); else None."""
    held = _nan_state(optimizer, p) if checked else None
    if held is not None:
        return DIAGNOSES["state_nan"].format(optimizer=type(optimizer).__name__, key=held)
    eps = vanishing_eps(optimizer, p)
    if eps is None:
        return None
    return DIAGNOSES["eps_vanishes"].format(eps=eps, dtype=str(p.dtype).replace("torch.", ""),
                                            optimizer=type(optimizer).__name__)


def _nan_state(optimizer: Any, p: torch.Tensor) -> str | None:
    """The name of a tensor of ``optimizer``'s state for ``p`` that holds NaN (``exp_avg_sq``), else None. The update
    read finite gradients (the watch checked them before it), and from those Adam & co make no NaN of finite state:
    a NaN there was in the state before (an optimizer checkpoint saved from a run gone NaN)."""
    try:
        state = optimizer.state.get(p, {})
        return next((str(k) for k, v in state.items() if isinstance(v, torch.Tensor) and kind_of(v) == "nan"), None)
    except Exception:  # noqa: BLE001 - an unusual optimizer: nothing can be said
        return None


def _finite(value: Any) -> bool:
    """Numbers and tensors (and tuples of them, Adam's betas) finite (``kind_of``); anything else does not enter the
    update."""
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    return kind_of(value) is None
