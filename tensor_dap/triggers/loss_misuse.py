"""A loss misused without an error: given what it computes itself, or a target of another shape.

``F.cross_entropy`` takes a log-softmax of its input and ``binary_cross_entropy_with_logits`` a sigmoid of
its: a model that already ends in ``nn.Softmax`` or ``torch.sigmoid`` squashes its scores twice, the
gradients shrink and learning stalls, with no error. ``nll_loss`` fed a softmax's output (not its log)
minimizes ``-p`` instead of ``-log p``. ``mse_loss`` (and the smooth L1 and Huber losses) of a prediction
of shape ``[N, 1]`` and a target of shape ``[N]`` broadcasts both to ``[N, N]``: every prediction is
compared with every target (torch warns once; many scripts silence warnings). All show in the loss's
autograd graph, a few nodes from its root: ``watch`` reads it once, at the first ``backward()`` it sees
(``loss_tap``), and says what it found.
"""

from __future__ import annotations

import math
from typing import Any

from .ops import forward_name, graph_nodes, producers

NODES = 64  # nodes of the loss's graph looked at, nearest its root first (the loss's own ops are there)

# (the loss's op, the op that made its input) -> what to say
RULES = {
    ("log_softmax", "softmax"): (
        "the loss takes log_softmax of a softmax's output, as F.cross_entropy (nn.CrossEntropyLoss) does when "
        "given probabilities: it applies the softmax itself, so the scores are squashed twice, the gradients shrink "
        "and learning stalls; hand it the logits (drop the model's final softmax)"),
    ("nll_loss", "softmax"): (
        "nll_loss is given a softmax's output: it expects log-probabilities, so it minimizes -p instead of -log p; "
        "take log_softmax instead of softmax, or cross_entropy of the logits"),
    ("binary_cross_entropy_with_logits", "sigmoid"): (
        "binary_cross_entropy_with_logits is given a sigmoid's output: it applies the sigmoid itself, so the "
        "scores are squashed twice and learning stalls; hand it the logits (drop the sigmoid), or use "
        "binary_cross_entropy on probabilities"),
}

_LOSS_OPS = {op for op, _ in RULES}


def misuse(loss: Any) -> str | None:
    """What the graph of ``loss`` shows a loss was given that it computes itself, or None. Never raises."""
    try:
        return _walk(loss)
    except Exception:  # noqa: BLE001 - a graph of an odd kind: nothing said
        return None


def _walk(loss: Any) -> str | None:
    for node in graph_nodes([getattr(loss, "grad_fn", None)], NODES):
        op = forward_name(node.name())
        if op in _LOSS_OPS:
            made = producers(node, 2)
            rule = RULES.get((op, made[1])) if len(made) > 1 else None
            if rule is not None:
                return rule
        if op in _ELEMENTWISE:
            said = _broadcast(op, node)
            if said is not None:
                return said
    return None


_ELEMENTWISE = {"mse_loss", "smooth_l1_loss", "huber_loss"}  # losses that broadcast their input to the target's


def _broadcast(op: str, node: Any) -> str | None:
    """The loss's input was broadcast (an ``expand`` node made it) to a shape with more elements than it had."""
    inputs = [child for child, _ in node.next_functions if child is not None and child.name() == "ExpandBackward0"]
    if not inputs:
        return None
    before = tuple(inputs[0]._saved_self_sym_sizes)
    after = tuple(node._saved_self.shape)
    if math.prod(after) <= math.prod(before):
        return None
    return (f"{op} compares a prediction of shape {list(before)} with a target of another shape: both were broadcast "
            f"to {list(after)}, so each prediction is compared with targets that are not its own and the loss still "
            f"falls (torch warns of it once); make the two shapes equal (output.squeeze(-1), or target.unsqueeze(-1))")
