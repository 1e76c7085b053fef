"""The planted bugs that never crash: the loss falls while part of the model does not train as written.

A head replaced after the optimizer was made (it never learns), a validation's ``model.eval()`` left on (the
rest of the run trains without dropout), a head built inside ``forward`` (new random weights at every
call), a running total of the loss kept with its graph (memory grows every step), a scheduler meant for epochs
stepped after every batch (the rate decays to nothing) and Adam at a rate meant for SGD (the loss reads 0 while
nothing learns). ``watch`` says each in one
line, which these scenarios take from the ``tensor_dap.triggers`` log where every such line also goes. One more
does crash, but with a message that names no line of the program (an in-place ReLU after a sigmoid): watch's note
under it names the op, its module and its line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .scenario import Context, Outcome
from .train import CLASSES, HIDDEN, DemoNet, train

STEPS = 12


@contextmanager
def _lines() -> Iterator[list[str]]:
    """The lines watch says while the block runs."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger, handler = logging.getLogger("tensor_dap.triggers"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


def _trained(model: Any, optimizer: Any, said_with: str, steps: int = STEPS,
             log: Any = None) -> tuple[str, list[float]]:
    """Train ``steps`` clean steps under a watch (``log(step, loss)`` after each): the first line it said containing
    ``said_with``, and the losses."""
    from ..triggers.watch import watch

    with _lines() as said, watch(model, optimizer, on="raise", capture=False):
        losses = train(model, optimizer, steps, bug=False, log=log)
    return next((s for s in said if said_with in s), ""), losses


def stale_optimizer(ctx: Context) -> Outcome:
    """A new head put on the model after ``SGD(model.parameters())`` took the old one's parameters."""
    import torch
    from torch import nn

    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head = nn.Linear(HIDDEN, CLASSES)  # BUG: the optimizer still holds the old head's parameters
    line, losses = _trained(model, optimizer, "never changed")
    caught = "head.weight, head.bias" in line
    found = "head.weight, head.bias never changed: in no param group of SGD" if caught else "nothing said"
    return Outcome(caught, [found, f"while the loss fell from {losses[0]:.3f} to {losses[-1]:.3f}"])


def eval_mode(ctx: Context) -> Outcome:
    """``model.eval()`` for a validation halfway, and no ``model.train()`` after it."""
    import torch
    from torch import nn

    from ..triggers.watch import watch

    model = DemoNet()
    model.encoder.append(nn.Dropout(0.2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with _lines() as said, watch(model, optimizer, on="raise", capture=False):
        train(model, optimizer, STEPS // 2, bug=False)
        model.eval()  # a validation ...
        with torch.no_grad():
            model(torch.randn(8, 16))
        losses = train(model, optimizer, STEPS // 2, bug=False)  # BUG: ... and training goes on in eval mode
    line = next((s for s in said if "is in eval mode" in s), "")
    caught = f"at the update of step {STEPS // 2}" in line and "1 Dropout acts" in line
    found = f"in eval mode from step {STEPS // 2}: its Dropout is off" if caught else "nothing said"
    return Outcome(caught, [found, f"while the loss fell to {losses[-1]:.3f}"])


def layer_in_forward(ctx: Context) -> Outcome:
    """A head built inside ``forward``: ``nn.Linear(...)(h)`` makes new random weights at every call."""
    import torch
    from torch import nn

    class HeadInForward(DemoNet):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.Linear(HIDDEN, CLASSES)(self.encoder(x))  # BUG: a new head at every call

    model = HeadInForward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    line, losses = _trained(model, optimizer, "built anew")
    caught = "Linear ×1 at silent_scenarios.py:" in line
    found = "a Linear built anew in every forward, named at its line" if caught else "nothing said"
    return Outcome(caught, [found, f"while the loss went from {losses[0]:.3f} to {losses[-1]:.3f}"])


def inplace(ctx: Context) -> Outcome:
    """``nn.ReLU(inplace=True)`` after a sigmoid, whose backward needs its output: ``backward()`` fails with torch's
    message, which names only a node and a shape; watch's note under it names the op, its module and its line."""
    import torch
    from torch import nn

    from ..triggers.watch import watch

    class SigmoidThenInplaceReLU(DemoNet):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.sigmoid(self.encoder(x))
            return self.head(self.act(h))  # BUG: changes sigmoid's output, which its backward needs

    model = SigmoidThenInplaceReLU()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_said = "backward() did not fail"
    with _lines() as said:
        try:
            with watch(model, optimizer, on="raise", capture=False):
                train(model, optimizer, STEPS, bug=False)
        except RuntimeError as exc:
            torch_said = "torch said: " + " ".join(str(exc).split(":")[1].split("Hint")[0].split()).rstrip(".")
    line = next((s for s in said if "changed in place" in s), "")
    named = re.search(r"changed in place by relu \(inplace=True\) in act \(ReLU\) at silent_scenarios\.py:\d+", line)
    found = f"sigmoid's output {named.group(0)}, under torch's error" if named else "nothing said"
    return Outcome(named is not None, [found, torch_said])


def running_total(ctx: Context) -> Outcome:
    """``total_loss += loss`` in a logging callback where ``loss.item()`` was meant: every step's graph stays alive
    through the total, and memory grows every step."""
    import torch

    from ..triggers.running_total import EVERY

    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    total_loss: Any = 0.0

    def log(step: int, loss: torch.Tensor) -> None:
        nonlocal total_loss
        total_loss = total_loss + loss  # BUG: loss.item()

    line, _ = _trained(model, optimizer, "holds a running total of the loss kept with its graph", 2 * EVERY + 1, log)
    found = re.search(r"`total_loss` \(in running_total at silent_scenarios\.py\) holds a running total of the loss "
                      r"kept with its graph at step (\d+): (\d+) additions", line)
    evidence = (f"`total_loss` holds {found.group(2)} steps' graphs at step {found.group(1)}, named with its function"
                if found else "nothing said")
    return Outcome(found is not None, [evidence, "while every loss printed right"])


def lr_schedule(ctx: Context) -> Outcome:
    """``StepLR(step_size=1, gamma=0.7)`` meant for epochs, stepped after every batch: the rate decays to nothing
    within 40 updates and the loss flattens, with no error."""
    import torch

    from ..triggers.running_total import EVERY

    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    line, losses = _trained(model, optimizer, "under a millionth", 2 * EVERY + 1,
                            log=lambda step, loss: scheduler.step())  # BUG: once per epoch was meant
    found = re.search(r"the learning rate is (\S+) at the update of step (\d+).*StepLR\(step_size=1, gamma=0\.7\) "
                      r"stepped (\d+) times", line)
    evidence = (f"the rate is {found.group(1)} at step {found.group(2)}: StepLR stepped {found.group(3)} times, once "
                "per batch" if found else "nothing said")
    return Outcome(found is not None, [evidence, f"while the loss sat at {losses[-1]:.3f}"])


def stalled(ctx: Context) -> Outcome:
    """Adam given ``lr=1.0``, a rate meant for SGD: the logits blow up until the loss reads exactly 0, which looks
    like success, but every softmax is saturated and no gradient moves the weights any more."""
    import torch

    from ..triggers.running_total import EVERY

    model = DemoNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)  # BUG: Adam's rate is 1e-3; 1.0 was SGD's habit
    line, losses = _trained(model, optimizer, "exactly zero at the updates", 2 * EVERY + 1)
    found = re.search(r"tensor_dap: (.*?) exactly zero at the updates of steps (\d+) and (\d+)", line)
    evidence = (f"{found.group(1)} exactly zero at steps {found.group(2)} and {found.group(3)}" if found
                else "nothing said")
    return Outcome(found is not None, [evidence, f"while the loss read {losses[-1]:.3g}"])
