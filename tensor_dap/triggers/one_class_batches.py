"""Batches of a single class each: a ``DataLoader`` without ``shuffle=True`` over data sorted by label.

``DataLoader`` does not shuffle by default, and ``ImageFolder`` (like many datasets built by walking a folder per
class) lists its samples class by class: every batch then holds one class, the model learns one class at a time
and forgets the others, and the loss still moves. ``watch`` reads the targets of ``nll_loss`` (what
``cross_entropy`` calls) in the graphs of the first ``BATCHES`` losses: a classification (a 1-D target of at
least ``MIN_BATCH`` samples, ``MIN_CLASSES`` classes or more) whose batches hold one class each (all but
``CROSSINGS``, which hold two: where the sorted data goes from one class to the next) is said once. The
comparisons stay on the device and are read once, at the last of those batches.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .ops import graph_nodes

BATCHES = 8  # the first losses looked at
MIN_BATCH = 16  # smaller batches hold one class by chance too often
MIN_CLASSES = 3  # a two-class problem may be that imbalanced
CROSSINGS = 2  # batches with two classes allowed among them (a class of few samples ends inside one)
NODES = 64  # of each loss's graph, nearest its root: where the loss's own ops are
_NLL = ("NllLossBackward0",)


def _targets(loss: Any) -> tuple[torch.Tensor, int] | None:
    """The target of the classification loss in ``loss``'s graph and its ignore_index, or None."""
    for node in graph_nodes([getattr(loss, "grad_fn", None)], NODES):
        if node.name() in _NLL:
            target, scores = node._saved_target, node._saved_self
            if target.dim() == 1 and target.numel() >= MIN_BATCH and scores.dim() == 2 \
                    and scores.shape[1] >= MIN_CLASSES:
                ignore = int(node._saved_ignore_index)
                return target, ignore - (1 << 64) if ignore >= 1 << 63 else ignore  # (read as unsigned)
            return None
    return None


class OneClassBatches:
    """Keeps, for each of the first batches, how many classes it held (1, 2, or 3 for more: a 0-dim device tensor)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # (how many classes: 1, 2, 3 for more; its class)

    def loss(self, loss: Any) -> bool:
        """Look at one more loss; True once nothing more is wanted (enough seen, or not a classification)."""
        found = _targets(loss)
        if found is None:
            return True
        target, ignore = found
        with torch.no_grad():
            top = target.amax()
            kept = target.masked_fill(target == ignore, top)  # ignored samples take a class the batch has
            low = kept.amin()
            classes = 1 + (low != top).int() + ((kept != low) & (kept != top)).any().int()
            self._kept.append((classes, top))
        if len(self._kept) < BATCHES:
            return False
        counts = torch.stack([n for n, _ in self._kept]).tolist()
        if max(counts) <= 2 and counts.count(2) <= CROSSINGS:
            classes = [int(c) for c, n in zip(torch.stack([c for _, c in self._kept]).tolist(), counts) if n == 1]
            runs = [c for k, c in enumerate(classes) if k == 0 or c != classes[k - 1]]
            which = (f"class {runs[0]} in every one" if len(runs) == 1
                     else f"class {', then '.join(map(str, runs))}")
            crossing = counts.count(2)
            held = (f"each of the first {BATCHES} batches holds a single class ({which})" if not crossing else
                    f"of the first {BATCHES} batches, {BATCHES - crossing} hold a single class ({which}) and "
                    f"{crossing} {'holds' if crossing == 1 else 'hold'} two, where one class gives way to the next")
            self.say(f"tensor_dap: {held}: a "
                     f"DataLoader without shuffle=True over data sorted by label (ImageFolder lists its samples class "
                     f"by class)? The model learns one class at a time and forgets the others; shuffle the training "
                     f"data (said once)")
        self._kept = []
        return True
