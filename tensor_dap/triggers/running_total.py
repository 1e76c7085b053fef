"""A running total of the loss kept with its graph: ``total_loss += loss`` where ``loss.item()`` was meant.

Nothing crashes and the numbers print right, but the total's graph chains every step's graph to the last: their
nodes stay alive (and their activations, where the total is taken before ``backward()`` or in an evaluation), and
memory grows step after step until an out-of-memory error, hours later, far from its cause. Every ``EVERY`` updates
``watch`` looks at the variables of the frames of your code that run the loop (the innermost ``FRAMES`` of them,
their ``self``'s attributes too: a trainer's ``self.total_loss``): a one-value tensor made by ``ADDS`` additions or
more, one of them older than the last look (autograd numbers its nodes as it makes them), is said once. The age is
what tells it from a sum of loss terms made in one step (a mixture of experts' per-layer losses: dozens of
additions, all new). Between the looks it costs one comparison a step.
"""

from __future__ import annotations

import sys
import time

from ..debug.frames import names_in, user_frame
from ..debug.oom import additions

EVERY = 64  # updates between two looks
FRAMES = 4  # frames of the program's own code looked at, innermost first
ADDS = 8  # additions, at least
BUDGET_S = 0.05  # a look's time, at most


def now() -> int:
    """Autograd's next node number on this thread (a node is made to read it); -1 where none can be made (an update
    under torch.inference_mode()): no look then."""
    import torch

    try:
        with torch.enable_grad():  # (an optimizer's step may run with gradients off)
            return torch.zeros((), requires_grad=True).expand(1).grad_fn._sequence_nr()
    except Exception:  # noqa: BLE001 - never a failure of the update it runs in
        return -1


def kept_total(step: int, since: int) -> str | None:
    """The line to say when a frame running the loop holds a running total kept with its graph, one of whose nodes
    was made before ``since`` (``now()`` at the last look), or None."""
    deadline = time.monotonic() + BUDGET_S
    frame = user_frame(sys._getframe(1))
    for _ in range(FRAMES):
        if frame is None:
            return None
        found = []  # (name, additions, whether it is the total itself: its last op an addition)
        for name, value in names_in(frame):
            if time.monotonic() > deadline:
                return None
            adds, oldest = additions(value, deadline)
            if adds >= ADDS and oldest < since:
                found.append((name, adds, type(value.grad_fn).__name__.startswith(("Add", "Sub"))))
        if found:
            name, adds, total = max(found, key=lambda f: f[2])  # the accumulator before a value made from it
            code = frame.f_code
            what = "a running total" if total else "a value made from a running total"
            return (f"tensor_dap: `{name}` (in {code.co_name} at {code.co_filename.rsplit('/', 1)[-1]}) holds {what} "
                    f"of the loss kept with its graph at step {step}: {adds:,} additions, each keeping a step's graph "
                    "alive (its nodes; its activations too where the total is taken before backward()) for as long as "
                    "it is held, so memory grows with the steps it counts. Add `loss.item()` (or `loss.detach()`) to "
                    "the total instead (said once)")
        frame = user_frame(frame.f_back)
    return None
