"""What one ``optimizer.step`` call carries, read from inside its hooks: the closure (LBFGS & co), the
GradScaler calling it (so ``watch`` finds the scaler by itself) and gradients by their stored values."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

MIN_SCALE = 1.0  # a GradScaler scale below this: gradients overflow even unscaled
SCALER_PROBE_STEPS = 20  # optimizer steps during which watch looks for a GradScaler calling them


def closure_of(args: Any, kwargs: Any) -> Callable[[], Any] | None:
    """The closure handed to ``optimizer.step(closure)`` (the hook's ``args`` start with the optimizer)."""
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    return closure if callable(closure) else None


def optimizers_given(optimizer: Any) -> tuple[Any, tuple[Any, ...]]:
    """``watch``'s ``optimizer``: one, None, or a list or tuple of those that update one model (Muon for the matrices
    and AdamW for the rest): (the first, the others). Anything else is a ``TypeError`` that says what was given."""
    several = tuple(optimizer) if isinstance(optimizer, (list, tuple)) else (optimizer,)
    for o in several:
        if not callable(getattr(o, "register_step_pre_hook", None)) and (o is not None or len(several) > 1):
            raise TypeError(f"watch: optimizer is {type(o).__name__}: expected a torch.optim optimizer, a list of "
                            "the optimizers updating the model, or None")
    if not several:
        raise TypeError("watch: optimizer is an empty list: give the optimizers updating the model, or None")
    return several[0], several[1:]


def param_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    """The ids of the parameters ``optimizer`` updates: which model is its (``attach``, ``watch`` finding one)."""
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def learning_rates(optimizer: Any) -> list[float]:
    """Each parameter group's learning rate, for a report (a group with none, an optimizer's own kind, is left out)."""
    return [float(g["lr"]) for g in optimizer.param_groups if "lr" in g]


def readable_rates(optimizer: Any) -> list[float]:
    """``learning_rates`` for a look that must not raise: [] where they cannot be read (a group with a rate of its
    own kind, no optimizer). A tensor rate is read too: the looks run every few dozen updates only."""
    try:
        return learning_rates(optimizer)
    except Exception:  # noqa: BLE001 - not looked at
        return []


def stored_values(grad: torch.Tensor) -> torch.Tensor:
    """A sparse gradient (``nn.Embedding(sparse=True)``) by its stored values: NaN there is NaN in the update."""
    if grad.layout == torch.sparse_coo:
        return grad._values()
    if grad.layout != torch.strided:
        return grad.values()
    return grad


def scaler_calling(optimizer: Any) -> Any:
    """The GradScaler whose ``step`` is calling ``optimizer.step`` right now, if any (a look up the stack)."""
    frame = sys._getframe(2)  # past this function and watch's hook
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code.co_name in ("_maybe_opt_step", "step"):
            owner = frame.f_locals.get("self")
            if owner is not None and type(owner).__name__ == "GradScaler" and hasattr(owner, "get_scale"):
                enabled = getattr(owner, "is_enabled", None)
                return owner if enabled is None or enabled() else None  # a disabled one only calls step()
        frame = frame.f_back
    return None

