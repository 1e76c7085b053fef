"""Whose backward is it: autograd's operators charged to the function of the program whose forward made them.

Backward runs inside the ``backward()`` call, so the innermost function of the program above a
backward operator is the training loop (or, under a trainer, the line that called the trainer):
``aten::convolution_backward 89%`` in ``train``. torch numbers every autograd node with a
per-thread sequence number, and the profiler keeps on each operator run with autograd on the number
the next node will take (so a batch stacked by the DataLoader shares it with the layer after): the
node was made by the *last* operator outside backward to start with its number, on its forward thread.
An operator under ``autograd::engine::evaluate_function: X`` is charged to the function above the
one that made X: ``Net.forward (backward)``. Where that forward was not recorded (it ran before the
window opened), the backward keeps the ``backward()`` caller. An optimizer's operators run where the loop called
``step()``; torch.optim records each call (``Optimizer.step#AdamW.step``), so they are told apart from the loop's own:
``train_step (AdamW.step)`` (a ViT's loop row said ``aten::mul_, aten::sqrt``: Adam's, not the loop's). Where steps
are counted by ``optimizer.step()``, the window closes in torch's post-step hook, inside the last step's record, which
then ends early (before its update's operators): those are told by torch.optim's own Python frames above them, and
given to the record on their thread that started last before them (makemore's loop row held one step's ``sqrt``).
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Optional

from .memory_sites import named_frame, user_frame

_NODE = "autograd::engine::evaluate_function: "
_OPTIMIZER = "Optimizer."  # torch.optim's records around its calls: "Optimizer.step#AdamW.step", "...zero_grad#..."
_OPTIM_CODE = "torch/optim/"  # in the names of the Python frames torch.optim runs (with_stack=True):
# "torch/optim/adam.py(347): _single_tensor_adam"
MAX_DEPTH = 256  # parents walked up from an event to find its autograd node (operators nest a few deep)
Frame = Optional[tuple[str, int, str]]


class Attribution:
    """``of(event)``: (the program's function an event's time belongs to, whether it is that function's backward)."""

    def __init__(self, events: list[Any]) -> None:
        self._frames: dict[int, Frame] = {}
        self._events = events  # (kept alive: the caches below are by id)
        self._nodes = {id(e): _node_above(e) for e in events}  # (each event's parents walked once)
        last: dict[tuple[int, int], Any] = {}  # (forward thread, sequence number) -> the operator that made the node
        for e in events:
            seq = getattr(e, "sequence_nr", -1)
            if seq is not None and seq >= 0 and self._nodes[id(e)] is None:  # (a node's own apply carries its number)
                key = (e.thread, seq)
                if key not in last or _start(e) >= _start(last[key]):
                    last[key] = e
        self._made = {key: self._frame(e) for key, e in last.items()}  # -> the function of that operator
        calls: dict[Any, list[tuple[float, str]]] = {}  # thread -> (start, "AdamW.step") of torch.optim's records
        for e in events:
            if _is_call(e):
                calls.setdefault(e.thread, []).append((_start(e), e.name.split("#", 1)[1]))
        self._calls = {thread: sorted(starts) for thread, starts in calls.items()}

    def of(self, event: Any) -> tuple[Frame, bool]:
        key = id(event)
        node = self._nodes[key] if key in self._nodes else _node_above(event)
        if node is not None:
            made = self._made.get((getattr(node, "fwd_thread", None), getattr(node, "sequence_nr", -1)))
            if made is not None:
                return made, True
        return self._frame(event), False

    def named(self, event: Any) -> tuple[Frame, bool]:
        """``of``, the function named by its ``def`` (``named_frame``), with the optimizer call it ran in said:
        ``train_step (AdamW.step)``."""
        found, backward = self.of(event)
        frame = named_frame(found)
        if frame is not None and not backward:
            call = _optimizer_call(event) or self._cut_call(event)
            if call is not None:
                frame = (frame[0], frame[1], f"{frame[2]} ({call})")
        return frame, backward

    def _cut_call(self, event: Any) -> str | None:
        """The optimizer call an operator ran in whose record ended before it (``named``): torch.optim's frames are
        above it, and the call is the one on its thread that started last before it."""
        starts = self._calls.get(event.thread)
        code = _first_above(getattr(event, "cpu_parent", None), lambda e: _OPTIM_CODE in e.name)
        if not starts or code is None or "lr_scheduler" in code.name:  # (a scheduler's step is not the optimizer's)
            return None
        i = bisect.bisect_right(starts, (_start(event), "\uffff"))
        return starts[i - 1][1] if i else None

    def _frame(self, event: Any) -> Frame:
        key = id(event)
        if key not in self._frames:
            self._frames[key] = user_frame(event)
        return self._frames[key]


def is_node_record(name: str) -> bool:
    """The profiler's record around one autograd node's work (``autograd::engine::evaluate_function: X``)."""
    return name.startswith(_NODE)


def _start(event: Any) -> float:
    span = getattr(event, "time_range", None)
    return getattr(span, "start", 0.0) if span is not None else 0.0


def _is_call(event: Any) -> bool:
    """torch.optim's record of a call (``Optimizer.step#AdamW.step``)."""
    return event.name.startswith(_OPTIMIZER) and "#" in event.name


def _optimizer_call(event: Any) -> str | None:
    """``AdamW.step`` for an event inside torch.optim's record of a call (``Optimizer.step#AdamW.step``); else None."""
    call = _first_above(event, _is_call)
    return call.name.split("#", 1)[1] if call is not None else None


def _node_above(event: Any) -> Any:
    """The ``evaluate_function`` event an operator runs under (itself, if it is one); None outside backward."""
    return _first_above(event, lambda e: is_node_record(e.name))


def _first_above(event: Any, test: Callable[[Any], bool]) -> Any:
    """``event`` or the nearest of its parents that passes ``test`` (``MAX_DEPTH`` looked at); None."""
    e, depth = event, 0
    while e is not None and depth < MAX_DEPTH:
        if test(e):
            return e
        e, depth = getattr(e, "cpu_parent", None), depth + 1
    return None
