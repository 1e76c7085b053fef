"""A loss misused without an error: given what it computes itself, or a target of another shape.

``F.cross_entropy`` takes a log-softmax of its input and ``binary_cross_entropy_with_logits`` a sigmoid of
its: a model that already ends in ``nn.Softmax`` or ``torch.sigmoid`` squashes its scores twice, the
gradients shrink and learning stalls, with no error. ``nll_loss`` fed a softmax's output (not its log)
minimizes ``-p`` instead of ``-log p``. ``mse_loss`` (and the smooth L1 and Huber losses) of a prediction
of shape ``[N, 1]`` and a target of shape ``[N]`` broadcasts both to ``[N, N]``: every prediction is
compared with every target (torch warns once; many scripts silence warnings). ``nll_loss`` of a ``log_softmax``
taken over another dim than its classes' (``dim=0``, the batch; or ``nn.LogSoftmax()`` with no dim on a 3-D
input, which torch normalizes over dim 0) normalizes each class over the batch; ``nll_loss`` of raw scores (no
``log_softmax`` at all: pytorch/examples' GAT with its last line dropped) minimizes ``-score``, which falls without
bound, and the loss goes negative: a value above 0, which no log-probability is, tells it. All show in the loss's
autograd graph, a few nodes from its root: ``watch`` reads it once, at the first ``backward()`` it sees
(``loss_tap``), and says what it found.
"""

from __future__ import annotations

import math
from typing import Any

from ..format import fmt_num
from .finite import slices
from .ops import first_input, forward_name, graph_nodes, producers

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
        if op in _NLL:
            said = _class_dim(node) or _not_log_probabilities(node)
            if said is not None:
                return said
    return None


_NLL = {"nll_loss", "nll_loss2_d"}  # (NllLoss2DBackward0: an input of 4 dims)
_VIEWS = {"ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0"}


def _class_dim(node: Any) -> str | None:
    """The ``log_softmax`` feeding ``nll_loss`` (directly, or through a view that merges its leading dims) was taken
    over another dim than the one holding the classes."""
    given = node._saved_self
    child, viewed = first_input(node), False
    while child is not None and child.name() in _VIEWS:
        child, viewed = first_input(child), True
    if child is None or child.name() != "LogSoftmaxBackward0":
        return None
    result = child._saved_result
    dim = child._saved_dim
    dim = (dim - (1 << 64) if dim >= 1 << 63 else dim) % max(result.dim(), 1)  # a negative dim is read as unsigned
    if viewed:  # the classes are the last dim of the log_softmax's output, kept by a view of shape [N, C]
        if given.dim() != 2 or result.dim() < 2 or result.shape[-1] != given.shape[1]:
            return None
        classes = result.dim() - 1
    else:
        classes = 1 if result.dim() >= 2 else 0
    if dim == classes:
        return None
    across = "the batch" if dim == 0 else f"dim {dim}"
    return (f"nll_loss is given a log_softmax taken over dim {dim} of a {list(result.shape)} tensor, but its classes "
            f"are dim {classes}: each class is normalized across {across}, not each sample over its classes, and the "
            f"loss still falls; take log_softmax(x, dim={classes}) (nn.LogSoftmax and nn.Softmax need their dim: with "
            f"none, a 3-D input is normalized over dim 0)")


MAX_READ = 1 << 16  # elements of an nll_loss's input read, at most (its first rows, ``finite.slices``' first piece)


def _not_log_probabilities(node: Any) -> str | None:
    """``nll_loss``'s input holds a value above 0: not log-probabilities (read where no log_softmax made them)."""
    made = producers(node, 2)
    if len(made) > 1 and made[1] == "log_softmax":
        return None
    given = node._saved_self
    if given.dim() == 0 or given.numel() == 0 or not given.is_floating_point():
        return None
    top = float(next(slices(given.detach(), MAX_READ)).amax())  # (rows whole where they fit, else part of one)
    if not (top > 1e-4):  # (a log of a probability rounded up past 1 is barely above 0; NaN is not said here)
        return None
    by = f" (made by {made[1]})" if len(made) > 1 else ""
    return (f"nll_loss is given values up to {fmt_num(top)}{by}, which log-probabilities never are (they are at most "
            "0): it is not handed a log_softmax, so it minimizes -score, which falls without bound, and the loss goes "
            "negative; end the model with log_softmax(x, dim=1), or use cross_entropy of the logits")


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
