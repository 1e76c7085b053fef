"""What ``watch`` keeps of a training step so it can run it again: its context, a replay window, a bundle source.

The step's arguments, RNG states and buffers at its start make a step re-runnable; with
``every > 1`` a window also keeps the parameters and optimizer state from before the first
unread step, so the failing step's exact pre-step state can be reached by replaying.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..state import BufferSnapshot, optimizer_state
from ..summary.held import held_bytes
from .localize import tensors_in

# every > 1 keeps a replay window (a copy of the parameters and optimizer state, plus each step's
# arguments) only while it holds at most this many bytes: a large model is localized on the
# detection step instead of doubling its memory.
WINDOW_BYTES = 512 * 2**20


@dataclass
class StepContext:
    """What ``w.step`` captured before running the step: enough to run it again."""

    index: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: dict[str, Any]
    buffers: BufferSnapshot
    checked: bool = False
    optimizer: torch.optim.Optimizer | None = None  # the one that stepped (found by the global hook)
    hyper: list[dict[str, Any]] | None = None  # every > 1: the optimizer's param_groups settings (lr...)
    updated: bool = False  # the step's optimizer update has run (the parameters are those after it)
    forwards: list[Any] | None = None  # an unchanged loop's step: the model's own forwards (see loop.py)
    outer: StepContext | None = None  # a closure evaluated inside step(): the w.step it belongs to (bundled)
    closure: bool = False  # ``fn`` is the closure handed to ``optimizer.step`` (LBFGS & co) in an unchanged loop
    # a closure's evaluation: the model's own forwards in it, which its bundle replays (re-run here, the closure
    # holds this step's batch; the program's closure in another process would hold another: Lightning's)
    kept_forwards: list[Any] | None = None

    @property
    def mode(self) -> str:
        """How its bundle replays: "loop" (the model's own forwards), "closure" (with the optimizer's closure, which
        ``tensor-dap run --replay`` takes from the program's first step) or "step" (with the step function)."""
        if self.forwards is not None or self.kept_forwards is not None:
            return "loop"
        return "closure" if self.closure else "step"

    @property
    def bundled_forwards(self) -> list[Any] | None:
        """The forwards its bundle keeps (None: its arguments)."""
        return self.forwards if self.forwards is not None else self.kept_forwards


@dataclass
class Window:
    """every > 1: the state at the start of the first step since the last clean read, and each step's context.

    A read finds the first failing step, but the model has moved on since; from this state the
    steps before it are replayed (with their updates) to reach its exact pre-step state, and it
    is localized there. Costs one copy of the parameters and optimizer state per ``every`` steps.
    """

    start: int
    params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    optimizer_state: dict[Any, dict[str, Any]]  # see state.optimizer_state
    steps: list[StepContext]
    nbytes: int = 0


@dataclass
class Source:
    """What an incident bundle holds when it is not the step being checked now (see ``Window``)."""

    ctx: StepContext
    model_state: dict[str, Any] | None  # None: the live state (the step being checked now)
    optimizer_state: dict[str, Any] | None


def nbytes(obj: Any) -> int:
    return sum(held_bytes(t) for _, t in tensors_in(obj))


def loss_of(result: Any) -> torch.Tensor | None:
    """The loss inside what a step function returned: a scalar tensor, the first item, or ['loss']."""
    if isinstance(result, dict):
        result = result.get("loss")
    elif isinstance(result, (tuple, list)) and result:
        result = result[0]
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        return result.detach()
    return None


def same_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` is ``b`` (or a detached view of it) unchanged since: the same memory, which ``b`` keeps alive
    so no other tensor can take it, the same dtype and version. A loss already read need not be read again."""
    try:
        return a.data_ptr() == b.data_ptr() != 0 and a.dtype == b.dtype and a._version == b._version
    except Exception:  # noqa: BLE001 - a tensor without memory (meta, fake): read it
        return False


def open_window(start: int, params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> Window | None:
    """Copy the parameters and optimizer state as they are now, the start of step ``start``; None if too large."""
    size = nbytes(params) + nbytes(list(optimizer.state.values()))
    if size > WINDOW_BYTES:
        return None
    return Window(start, [p.detach().clone() for p in params], optimizer, optimizer_state(optimizer), [], size)


def add_to_window(window: Window, ctx: StepContext) -> bool:
    """Keep ``ctx`` for a replay; False when the batches held outgrew the budget (the window is then dropped)."""
    window.nbytes += nbytes((ctx.args, ctx.kwargs, ctx.buffers.values))
    if window.nbytes > WINDOW_BYTES:
        return False
    window.steps.append(ctx)
    return True
