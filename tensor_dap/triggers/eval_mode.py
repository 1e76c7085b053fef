"""A model updated while in eval mode: ``model.eval()`` for a validation, and no ``model.train()`` after it.

Nothing crashes and the loss still falls: dropout is off and batch norm normalizes with its running
statistics and stops updating them, so the model trains unlike it was designed to (and overfits, or
drifts from the statistics it is evaluated with). ``watch`` looks at the root module's mode at each
update (one attribute); the first update in eval mode is said once, naming the layers that behave
differently, and only where the model has such layers (a model of Linear layers alone acts the same
in both modes). A submodule put in eval mode on purpose (a frozen batch norm in a fine-tuned backbone)
leaves the root in train mode and is not said.

The converse, an evaluation without ``model.eval()``: the unchanged loop's capture sees each forward of the
model under ``torch.no_grad()`` (it lets them through untouched); ``EVAL_FORWARDS`` of them in a row in train mode,
with no training forward between (a GAN's generator making a batch for its discriminator under ``no_grad`` runs
one between two training forwards), is a validation with dropout on whose batches move batch norm's running
statistics, said once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from torch import nn

from ..format import plural
from .aftermath import say
from .live_dropout import Spotted, checked_forward

MAX_MODULES = 100_000  # modules looked at, at most (once, when the model is first seen updating in eval mode)
EVAL_FORWARDS = 3  # forwards under no_grad in train mode in a row, with no training forward between: an evaluation


def mode_dependent(model: nn.Module, training: bool = False) -> Counter[str]:
    """The layers of ``model`` in eval mode (``training``: in train mode) that act differently in the other mode,
    counted by class name."""
    found: Counter[str] = Counter()
    for i, module in enumerate(model.modules()):
        if i >= MAX_MODULES:
            break
        if module.training == training and _differs(module):
            found[type(module).__name__] += 1
    return found


def _differs(module: nn.Module) -> bool:
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, nn.modules.batchnorm._NormBase):  # batch norm; instance norm only with running stats
        return module.track_running_stats
    if isinstance(module, nn.MultiheadAttention):
        return module.dropout > 0
    return False


def _effects(layers: Counter[str], *, dropout: str, norm: str) -> list[str]:
    """What the mode changes in ``layers`` (``mode_dependent``'s), told as ``dropout`` and ``norm`` say it."""
    effects = []
    if any("Dropout" in name or name == "MultiheadAttention" for name in layers):
        effects.append(dropout)
    if any("Norm" in name for name in layers):
        effects.append(norm)
    return effects


def line(model_name: str, step: int, layers: Counter[str]) -> str:
    """What the user reads, once: ``its 2 Dropout and 1 BatchNorm1d act as in evaluation ...``."""
    kinds = [f"{n} {name}" for name, n in layers.most_common(4)]
    if len(layers) > 4:
        kinds.append(f"{plural(len(layers) - 4, 'more kind')} of layer")
    named = kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"
    effects = _effects(layers, dropout="dropout is off",
                       norm="batch norm uses its running statistics and stops updating them")
    acts = "acts" if sum(layers.values()) == 1 else "act"
    return (f"tensor_dap: {model_name} is in eval mode at the update of step {step}, so its {named} {acts} as in "
            f"evaluation while it trains ({'; '.join(effects)}): model.eval() for a validation with no model.train() "
            f"after it? Call model.train() before training steps (said once)")


def say_once(model: nn.Module, step: int, dropout_off: Spotted | None = None) -> None:
    """Say the line when ``model``, updated in eval mode at ``step``, has layers the mode changes, or its forward
    calls a functional dropout that follows the mode (``dropout_off``: one an evaluation saw off)."""
    layers = mode_dependent(model)
    if layers:
        say(line(type(model).__name__, step, layers))
    elif dropout_off is not None:
        op, at = dropout_off
        where = f" at {at} (`{at.code}`)" if at is not None and at.code else ""
        say(f"tensor_dap: {type(model).__name__} is in eval mode at the update of step {step}, so {op}{where}, "
            f"whose training flag follows the model's mode, is off while it trains: model.eval() for a validation "
            f"with no model.train() after it? Call model.train() before training steps (said once)")


class Evaluations:
    """The model's forwards under ``no_grad`` (evaluations): in train mode, counted since its last training forward
    (``count``, reset by the capture) and said once when ``EVAL_FORWARDS`` were and the model has layers the mode
    changes; in eval mode, the first one's dropout calls looked at (``live_dropout``)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.count = 0
        self.done = False
        self.compiled = False  # the model's call is compiled (set by the capture): dropout is not looked at
        self._dropout_seen = False  # the first evaluation in eval mode had its dropout calls looked at
        self.dropout_off: Spotted | None = None  # a functional dropout that evaluation saw off: it follows the mode

    def forward(self, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A forward of the model under no_grad: ``inner(*args, **kwargs)``, the first in eval mode with its dropout
        calls looked at (``live_dropout``)."""
        if not self.model.training:
            if self._dropout_seen or self.compiled:
                return inner(*args, **kwargs)
            self._dropout_seen = True
            output, self.dropout_off = checked_forward(self.model, inner, args, kwargs)
            return output
        self._count()
        return inner(*args, **kwargs)

    def _count(self) -> None:
        if self.done:
            return
        self.count += 1
        if self.count < EVAL_FORWARDS:
            return
        self.done = True
        layers = mode_dependent(self.model, training=True)
        if not layers:
            return
        kinds = ", ".join(f"{n} {name}" for name, n in layers.most_common(4))
        effects = _effects(layers, dropout="dropout drops activations",
                           norm="batch norm normalizes with each batch's statistics and moves its running statistics "
                                "toward these batches")
        say(f"tensor_dap: {type(self.model).__name__} ran {EVAL_FORWARDS} forwards in a row under torch.no_grad() in "
            f"train mode, so its {kinds} act as in training ({'; '.join(effects)}): an evaluation without "
            f"model.eval()? Call model.eval() before it and model.train() after (said once)")
