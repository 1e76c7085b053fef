"""After a report: training on NaN is never silent; nor is a loss that never moves.

Once a trigger has reported and the user continued (or ``on="log"``), the next step that is
still non-finite prints one line on stderr, and so do later ones, at most one every ``INTERVAL``
seconds (with how many were not printed); the end of the run (``close``, the ``with`` block,
interpreter exit) says how many steps were non-finite in all. ``flat_loss`` tells a loss with one exact value over
its last ``FLAT_STEPS`` steps: a run that trains nothing looks calm too (pytorch/examples' DDP tutorial takes a
cross-entropy over a single class, which is 0 whatever the model; its dcgan with a learning rate of 0.05 saturates
both models' sigmoids, at binary cross-entropy's cap of 100). The silent checks say it at the watch's looks every
``running_total.EVERY`` updates and at the end of the run, through ``at_end``, which says a line once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from ..dist import launch_rank
from ..format import printable

log = logging.getLogger("tensor_dap.triggers")
INTERVAL = 5.0  # seconds between two "still non-finite" lines
FLAT_STEPS = 32  # steps in a row with one exact loss value: no loss computed from changing batches does that
BCE_CAP = 100.0  # nn.BCELoss / F.binary_cross_entropy clamp log at -100: a prediction of exactly 0 or 1 on the wrong
# side costs this, with a gradient all but 0 through the sigmoid that saturated (sigmoid'(x) = s(1 - s))


def say(text: str) -> None:
    """One yellow line on stderr (above the program's progress bars) and in the program's log files, never raising."""
    try:
        from ..console import log_unprinted, note

        log_unprinted(log, logging.WARNING, text)
        note(printable(text))
    except Exception as exc:  # noqa: BLE001 - a broken terminal must not break training
        log.debug("could not print: %r", exc)


class Aftermath:
    """Counts non-finite steps after the first report; rate-limited lines while training goes on."""

    def __init__(self, model: str = "") -> None:
        self.model = model  # the watched model's class, named in every line (a GAN has two watches talking)
        # (torchrun's ranks print to one terminal; read from the environment: at the end, the process group is gone)
        self.rank = launch_rank().prefix
        self.first: int | None = None  # the step of the first report
        self.count = 0  # non-finite steps seen, the reported ones included
        self.unprinted = 0
        self._last = float("-inf")
        self._counted = -1  # the last step counted: a step's loss and gradients are read apart
        self._said: set[str] = set()  # the lines ``at_end`` said: one said during the run is not said again at its end

    @property
    def through(self) -> int:
        """The last step counted as non-finite (-1 before any)."""
        return self._counted

    def _add(self, steps: list[int]) -> None:
        new = [s for s in steps if s > self._counted]
        self.count += len(new)
        self._counted = max([self._counted, *new])

    def reported(self, step: int | None, failing: list[int] | None = None) -> None:
        if self.first is None:
            self.first = step
        self._add(failing or ([step] if step is not None else []))
        self._last = float("-inf")  # the first step after the report is always said

    def again(self, step: int, failing: list[int] | None = None) -> None:
        """Another read found non-finite values while the report stands (the model stays NaN)."""
        self._add(failing or [step])
        now = time.monotonic()
        if now - self._last < INTERVAL:
            self.unprinted += 1
            return
        more = f"; {self.unprinted} more not shown" if self.unprinted else ""
        model = f"{self.model} " if self.model else ""
        self._say(f"tensor_dap: {model}step {step} is non-finite too: training goes on with NaN/Inf "
                  f"({self.count} non-finite steps since step {self.first}{more})")
        self._last, self.unprinted = now, 0

    def caused(self, step: int | None, model: str, since: int | None) -> None:
        """This model's first non-finite step came from another watched model's output, whose NaN step was
        reported and trained on (``c`` at its stop, ``on="log"``): said in a line, not stopped for again."""
        name = f"{self.model} " if self.model else ""
        self._say(f"tensor_dap: {name}step {step} is non-finite: its input is the output of {model}, whose weights "
                  f"are non-finite since its step {since} reported above; training goes on with NaN/Inf")
        self._last = time.monotonic()

    def _say(self, text: str) -> None:
        say(self.rank + text)

    def at_end(self, text: str | None) -> None:
        """A line of the end of the run, named after the watch that says it (none for None)."""
        if text is None or text in self._said:
            return
        self._said.add(text)
        self._say(f"tensor_dap.watch{f'({self.model})' if self.model else ''}: {text}")

    def summary(self, steps: int) -> None:
        """The end of the run: how many steps were non-finite."""
        if self.count:
            were = "was" if self.count == 1 else "were"
            self.at_end(f"{self.count} of the {steps} steps watched {were} non-finite (the first at step "
                             f"{self.first})")


def latest_loss(history: Sequence[Any]) -> float | None:
    """The latest of a watch's losses (a value, or a 0-dim tensor read here: at a look or the end of a run), None where
    there is none or it cannot be read."""
    try:
        return float(history[-1]) if len(history) else None
    except Exception:  # noqa: BLE001 - a device that cannot be read any more: nothing said
        return None


def flat_loss(history: Sequence[Any]) -> str | None:
    """What a loss with one exact finite value in each of its last ``FLAT_STEPS`` steps means, None for any other
    (values or 0-dim tensors: read here, at a look of the watch's or the end of a run)."""
    if len(history) < FLAT_STEPS:
        return None
    try:  # latest first, each read only while the ones after it are equal: a moving loss costs two reads
        recent = list(history)[-FLAT_STEPS:]  # (a watch's history is a deque: no slices)
        value = float(recent[-1])
        if not math.isfinite(value) or any(float(v) != value for v in reversed(recent[:-1])):
            return None
    except Exception:  # noqa: BLE001 - a device that cannot be read any more (the run crashed on it): nothing said
        return None
    if value == 0:
        return (f"the loss was exactly 0 in each of the last {FLAT_STEPS} steps, so no gradient came from it: a loss "
                f"that is 0 whatever the model does (a cross-entropy over a single class: logits of shape [N, 1]), "
                f"or a model that already fits every batch exactly (with binary cross-entropy: a sigmoid saturated at "
                f"exactly the targets, passing back no gradient; a GAN's generator once its discriminator calls "
                f"everything real)")
    if 0 < value <= BCE_CAP * 1e6 and value % BCE_CAP == 0:  # (a sum over up to a million predictions)
        return (f"the loss was exactly {value:.6g} in each of the last {FLAT_STEPS} steps: "
                f"{'' if value == BCE_CAP else 'a multiple of '}binary cross-entropy's cap (nn.BCELoss clamps log at "
                f"-100), the cost of a prediction of exactly 0 or 1 on the wrong side, where the sigmoid saturated and "
                f"passes back all but no gradient: lower the learning rate (a large one saturates it), and give the "
                f"logits to nn.BCEWithLogitsLoss (no sigmoid in the model), which keeps a gradient there")
    return (f"the loss was exactly {value:.6g} in each of the last {FLAT_STEPS} steps: nothing the model learns "
            f"changes it (a learning rate of 0, frozen parameters, an output detached from them, or one batch "
            f"repeated with no update)")
