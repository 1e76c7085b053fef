"""Parameters that get gradients and never change: in no param group of the optimizer that steps the model.

An optimizer made before a layer was replaced (``model.fc = nn.Linear(...)`` after ``Adam(model.parameters())``),
or given part of the model (``SGD(model.head.parameters())``) while the rest still requires grad: the loss
falls (the optimized part learns), nothing crashes, and the other parameters stay as they were, their
gradients computed for nothing. At the first update ``watch`` sees, the model's parameters that have a gradient
and are in none of the optimizer's groups are noted, with a sample of their values (another optimizer may
update them: a GAN's, a second optimizer for the head); at the 20th update (or the end of a shorter run), those
whose sample never changed are said. Nothing is added to later steps.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks.result import names
from .finite import spread

SAMPLE = 4096  # elements of each suspect parameter kept (spread over it), to tell at the end whether it changed
MAX_SUSPECTS = 4096  # parameters followed at most
NAMED = 4
UPDATES_AFTER = 2  # updates of the watched model after a parameter was noted before its sample says anything


class Followed:
    """Parameters followed from when they were noted until they are looked at again: a bounded sample of each, kept,
    and how many updates of the watched model came after (a run that crashed, or ended, before those had a chance to
    change them says nothing)."""

    def __init__(self, updates: Callable[[], int]) -> None:
        self._kept: list[tuple[str, torch.Tensor, torch.Tensor, int]] = []  # (name, parameter, its sample, updates)
        self._updates = updates  # the watched model's updates so far (counted while it looks for a GradScaler)
        self.over = 0  # the updates the parameters ``unchanged`` named last went through unchanged

    def add(self, name: str, p: torch.Tensor) -> None:
        if len(self._kept) < MAX_SUSPECTS:
            with torch.no_grad():
                self._kept.append((name, p, spread(p, SAMPLE), self._updates()))

    def unchanged(self) -> list[str]:
        """The names of those whose sample is what it was ``UPDATES_AFTER`` updates later; nothing is followed after."""
        now = self._updates()
        with torch.no_grad():
            still = [(name, at) for name, p, then, at in self._kept
                     if now - at >= UPDATES_AFTER and torch.equal(spread(p, SAMPLE), then)]
        self._kept = []
        self.over = now - min((at for _, at in still), default=now)  # updates they outlasted
        return [name for name, _ in still]


def listed(found: list[str]) -> str:
    """The first names, and how many more."""
    return names(found, NAMED)


class Unoptimized:
    """The parameters noted at the first update, and the line said when they are looked at again."""

    def __init__(self, followed: Followed) -> None:
        self._followed = followed
        self._optimizer = ""

    def first_update(self, model: torch.nn.Module, optimizer: Any) -> None:
        """Note the model's parameters with a gradient that ``optimizer`` does not hold (none without one)."""
        if optimizer is None or not hasattr(optimizer, "param_groups"):
            return
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self._optimizer = type(optimizer).__name__
        for name, p in model.named_parameters():
            if p.requires_grad and p.grad is not None and id(p) not in held:
                self._followed.add(name, p)

    def unchanged(self) -> str | None:
        """The parameters that had a gradient and are unchanged since the first update; None when there are none."""
        still = self._followed.unchanged()
        if not still:
            return None
        names = listed(still)
        one = len(still) == 1
        return (f"{len(still)} parameter{'' if one else 's'} ({names}) got gradients and never changed over "
                f"{self._followed.over} updates: "
                f"{'it is' if one else 'they are'} in no param group of {self._optimizer}, the optimizer that "
                f"updates the model. A layer replaced after the optimizer was made, or an optimizer given part of "
                f"the model? Make the optimizer from the final model's parameters; to freeze "
                f"{'it' if one else 'them'} on purpose, set requires_grad_(False) (their gradients cost a backward "
                f"for nothing)")

