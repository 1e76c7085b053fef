"""Gradients exactly zero: a model that stopped learning while the run goes on.

pytorch/examples' REINFORCE with Adam's rate raised to 3 saturates its policy's softmax within a few dozen
episodes: the probabilities are exactly 1 and 0, the log-probability of the action taken is exactly 0, and so is
every gradient from then on. The run goes on for hours at the reward of a fixed action, with no error and no NaN.
An MLP whose ReLUs all died (a large negative bias) is the same but for its last layer's bias. Every
``running_total.EVERY`` updates the watch reads which gradients the optimizer will use are exactly zero (one norm
per tensor on its device, one read back per device); when no weight matrix (a tensor of two dimensions or more:
biases and norm scales alone cannot learn from the inputs) gets one at two looks in a row (one such update can be a
batch whose loss is exactly flat), it is said once, with the tensors still learning, the learning rate and the usual
causes. An expert or an embedding row left idle does not count: another weight matrix learns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..checks.result import names as listed
from ..format import fmt_num
from ..probe.grads import grad_norms
from .aftermath import latest_loss
from .optimizer_call import readable_rates

_NAMED = 3  # tensors still learning named at most
_SAMPLED = 1024  # a gradient's elements read (16 runs spread over it) before the whole of it


class StalledGradients:
    """The looks at which gradients are exactly zero, for one watch."""

    def __init__(self) -> None:
        self._zero_at: int | None = None  # the step of the last look that found no weight matrix learning
        self.said = False

    def look(self, params: list[torch.Tensor], optimizer: Any, step: int, model: torch.nn.Module,
             losses: Sequence[Any] = ()) -> str | None:
        """The line to say when no weight matrix gets a non-zero gradient at the update of ``step`` and at the last
        look (a model of vectors only: no tensor); ``losses``: the watch's recent ones, the latest read when said."""
        if self.said:
            return None
        held = [p for p in params if p.grad is not None]
        weights = [p for p in held if p.dim() >= 2] or held
        stalled = bool(held) and not any(map(_learning, weights))  # (stops at the first weight matrix learning)
        last, self._zero_at = self._zero_at, (step if stalled else None)
        if not stalled or last is None:
            return None
        self.said = True
        live = [p for p, z in zip(held, zero_grads(held)) if not z]
        which = (f"every gradient the optimizer holds ({len(held)} tensors) is" if not live else
                 f"the gradients of {len(held) - len(live)} of the {len(held)} tensors the optimizer holds are "
                 f"(only {_names(live, model)} still get{'s' if len(live) == 1 else ''} one)")
        rate, loss = max(readable_rates(optimizer), default=None), latest_loss(losses)
        known = ([f"the loss: {fmt_num(loss)}"] if loss is not None else []) + (
            [f"the learning rate: {fmt_num(rate)}"] if rate is not None else [])
        context = f" ({', '.join(known)})" if known else ""
        return (f"tensor_dap: {which} exactly zero at the updates of steps {last} and {step}, so the weights no "
                f"longer learn while the run goes on{context}. Usual causes: saturated outputs (a softmax or sigmoid "
                f"at exactly 0 and 1, often after a learning rate too high), ReLUs that all died (a large negative "
                f"bias, a rate too high), or a loss that does not depend on the parameters (multiplied by 0, computed "
                f"from detached tensors); a hinge loss whose margins are all met gives zero gradients too (said once)")


def zero_grads(tensors: list[torch.Tensor]) -> list[bool]:
    """Whether each gradient (of ``tensors``) is exactly zero (a NaN is not): ``probe.grads``' norms, one read back
    per device. Unreadable ones count as non-zero (nothing said)."""
    return [norm == 0.0 for norm in grad_norms([t.grad for t in tensors])]


def _learning(p: torch.Tensor) -> bool:
    """Whether ``p``'s gradient has an element that is not exactly zero (a NaN counts): about ``_SAMPLED`` values spread
    over it read first, where a learning weight's gradient shows it (~4 µs against ~14 for the norm of a 784×256
    one); the whole gradient read (``zero_grads``) only when they are all zero."""
    g = p.grad
    try:
        if g.layout == torch.strided and g.is_contiguous() and g.numel() > _SAMPLED:
            with torch.no_grad():
                flat = g.view(-1)  # 16 runs of 64 spread over it (a dead unit's row is 0), 64 cache lines read
                if bool(flat[:flat.numel() // 16 * 16].view(16, -1)[:, :_SAMPLED // 16].any()):
                    return True
    except Exception:  # noqa: BLE001 - read the careful way below
        pass
    return not zero_grads([p])[0]


def _names(live: list[torch.Tensor], model: torch.nn.Module) -> str:
    """``fc3.bias``: the model's names of the tensors still learning (the first few)."""
    names = {id(p): n for n, p in model.named_parameters()}
    return listed([names.get(id(p), f"a parameter of shape {list(p.shape)}") for p in live], _NAMED)
