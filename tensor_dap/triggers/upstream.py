"""A batch that another watched model made: where the discriminator's non-finite input came from.

In a GAN the discriminator's batch is the generator's output. When a watch finds its batch already
non-finite, the open watch whose model made that batch (``LoopCapture.made``) is asked: its weights
may be non-finite already (an update after a step it reported was continued), or its captured forwards
are re-run to find the op. The finding then names the other model's modules and says so.
"""

from __future__ import annotations

from typing import Any

import torch

from . import active
from .localize import Finding, nonfinite_parameters


def upstream(watch: Any, finding: Finding | None) -> Finding | None:
    """Where another open watch's model made ``finding``'s non-finite batch, or None."""
    birth = finding.birth if finding is not None else None
    if birth is None or birth.phase != "input":
        return None
    bad = next((t for _, t in birth.inputs if isinstance(t, torch.Tensor)), None)
    for other in active.watches():
        loop = getattr(other, "_loop", None)
        if other is watch or bad is None or loop is None or not loop.made(bad):
            continue
        name, broken = type(other._inner).__name__, nonfinite_parameters(other._inner, first_step=not other.step_count,
                                                                         optimizer=other._updater)
        if broken is not None:  # its weights are non-finite already: an update after a step it reported
            earlier = f"; {name}'s non-finite step was reported before" if other.reports else ""
            broken.note = (f"this model's input is the output of {name}, watched too, whose parameters are "
                           f"non-finite (module paths are {name}'s): {broken.note}{earlier}")
            if other.reports:  # the run was continued past that report: this is its aftermath, not news
                broken.culprit["aftermath_of"] = (name, other.reports[-1].step)
            return broken
        ctx = other._loop_context()
        found = other._rerun(ctx) if ctx is not None else None
        if found is not None and found.phase in ("forward", "input"):
            found.note = (f"this model's input is the output of {name}, watched too: born in {name}'s "
                          f"forward (module paths are {name}'s). " + found.note).strip()
            return found
    return None
