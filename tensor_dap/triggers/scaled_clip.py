"""Gradients clipped while a ``GradScaler`` still scales them: ``clip_grad_norm_`` with no
``scaler.unscale_(optimizer)`` before it.

Under mixed precision the gradients ``backward()`` leaves are multiplied by the scaler's scale (65536 at first);
``scaler.step`` divides them back. Clipped before that, the norm measured is the scale times too big, so every step
is clipped to a sliver of ``max_norm`` (the model barely learns), or a clip by value cuts at a bound the scale times
too small; nothing fails. ``loss_tap`` notes each clip while a watch listens; when a scaler has scaled a loss and none
of its optimizers was unscaled since its last update, the clip is said once.
"""

from __future__ import annotations

import weakref
from typing import Any

_scaler: list[Any] = [None]  # the GradScaler that last scaled a loss while anyone listened (weakly)
_said = [False]


def scaled_by(scaler: Any) -> None:
    """``scaler`` has just scaled a loss."""
    if _scaler[0] is None or _scaler[0]() is not scaler:
        _scaler[0] = weakref.ref(scaler)


def clipped(kind: str, bound: Any) -> str | None:
    """The line to say for a clip (``kind``: "norm" or "value", its ``bound``) of gradients a scaler still scales, once;
    None otherwise."""
    scaler = _scaler[0]() if _scaler[0] is not None else None
    if _said[0] or scaler is None or not getattr(scaler, "_enabled", False):
        return None
    try:
        from torch.amp.grad_scaler import OptState

        states = scaler._per_optimizer_states
        if any(s.get("stage") is OptState.UNSCALED for s in states.values()):
            return None  # unscale_ ran for an optimizer since the last update
        scale = float(scaler.get_scale())  # (on an accelerator a read: once, the first clip of scaled gradients)
    except Exception:  # noqa: BLE001 - a scaler of another make: not told
        return None
    _said[0] = True  # looked at once, said or not: no read of the scale at every clip
    if scale <= 1:
        return None
    call = "clip_grad_norm_" if kind == "norm" else "clip_grad_value_"
    effect = (f"the norm it measures is {scale:g} times too big, so it clips every step to a sliver of max_norm"
              if kind == "norm" else f"it cuts at a bound {scale:g} times too small")
    at = f"={bound:g}" if isinstance(bound, (int, float)) else ""
    return (f"tensor_dap: {call}({'max_norm' if kind == 'norm' else 'clip_value'}{at}) ran on gradients the GradScaler "
            f"still scales (x{scale:g}): {effect}, and the model barely learns. Call scaler.unscale_(optimizer) "
            "before clipping (said once)")


def forget() -> None:
    """Nobody listens any more."""
    _scaler[0] = None
    _said[0] = False
