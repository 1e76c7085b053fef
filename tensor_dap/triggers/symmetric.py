"""Units that stay identical: a layer initialized to a constant (``nn.init.zeros_``, ``constant_``) whose units all
compute the same thing, get the same gradient, and so never differ.

A zero- or constant-initialized hidden layer followed by another one keeps its output units in lockstep: every
row of its weight gets the same update, the layer acts as one unit however wide it is, and the loss still falls a
little. A single zero-initialized layer (a classifier, a residual branch's last projection: a deliberate trick)
breaks its symmetry at the first update, since its outputs get different gradients. So ``watch`` looks once, at
the update named ``AT``: weights (2-D and up, two or more output units; not an embedding's table, whose rows are
tokens, unseen ones all alike) whose first ``ROWS`` rows are still all equal are said. The comparisons stay on
the device and are read together.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..checks.result import names

AT = 2  # the update looked at (0 the first): two updates have run
ROWS = 64  # output units compared, at most, per weight
NAMED = 4


def identical_units(model: nn.Module) -> list[tuple[str, int]]:
    """(name, units) of each trainable weight of ``model`` whose first ``ROWS`` output units are identical."""
    named, flags = [], []
    tables = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}  # rows: tokens
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad or p.dim() < 2 or p.shape[0] < 2 or p.is_sparse or id(p) in tables:
                continue
            rows = p[:ROWS].reshape(min(p.shape[0], ROWS), -1)
            flags.append(torch.eq(rows[1:], rows[:1]).all())
            named.append((name, p.shape[0]))
    if not flags:
        return []
    return [entry for entry, same in zip(named, torch.stack(flags).tolist()) if same]


def say_once(model: nn.Module, say: Callable[[str], None]) -> None:
    """Say the weights whose units are still identical after ``AT`` updates, if any."""
    found = identical_units(model)
    if not found:
        return
    listed = names([f"{name} ({units} units)" for name, units in found], NAMED)
    say(f"tensor_dap: after {AT} updates the output units of {listed} still have identical weights, so they "
        f"compute the same thing and get the same gradient: a constant or zero initialization (nn.init.zeros_, "
        f"constant_) never breaks that symmetry, and the layer acts as one unit; initialize the weights randomly "
        f"(the layer's own default, or nn.init.kaiming_uniform_) (said once)")
