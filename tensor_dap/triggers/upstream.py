"""A batch that another watched model made: where the discriminator's non-finite input came from.

In a GAN the discriminator's batch is the generator's output. When a watch finds its batch already
non-finite, the open watch whose model made that batch (``LoopCapture.made``) is asked: its weights
may be non-finite already (an update after a step it reported was continued), or its captured forwards
are re-run to find the op. The finding then names the other model's modules and says so.
"""

from __future__ import annotations

from typing import Any

from . import active
from .birth import input_tensors
from .held_now import nonfinite_parameters
from .localize import Finding, tensors_in
from .origin import GRAD_AT_OUTPUTS


def upstream(watch: Any, finding: Finding | None) -> Finding | None:
    """Where another open watch's model made ``finding``'s non-finite batch, or its non-finite output gradient
    (``downstream``); None where neither."""
    birth = finding.birth if finding is not None else None
    if birth is not None and birth.phase == "loss" and birth.inputs and birth.inputs[0][0] == GRAD_AT_OUTPUTS:
        return downstream(watch)
    if birth is None or birth.phase != "input":
        return None
    bad = next(iter(input_tensors(birth.inputs)), None)
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
        found = _born_in(other, ("forward", "input"), "this model's input is the output of {name}, watched too: born "
                         "in {name}'s forward")
        if found is not None:
            return found
    return None


def downstream(watch: Any) -> Finding | None:
    """The gradient arriving at this model's outputs is non-finite, and another open watch's model took them as its
    input in this step (a seq2seq's decoder, given the encoder's outputs, each with an optimizer of its own; the
    encoder's steps first): that model's captured forwards are re-run, and where the NaN was born in it is this
    step's finding, with the other model's module paths."""
    loop = getattr(watch, "_loop", None)
    for other in active.watches():
        theirs = getattr(other, "_loop", None)
        if other is watch or loop is None or theirs is None or not any(
                loop.made(t) for f in theirs.forwards for _, t in tensors_in((f.args, f.kwargs))):
            continue
        found = _born_in(other, ("forward", "backward"), "the gradient at this model's outputs came from {name}, "
                         "watched too, which took them as its input: born in {name}'s {phase}")
        if found is not None:
            return found
    return None


def _born_in(other: Any, phases: tuple[str, ...], said: str) -> Finding | None:
    """Where ``other``'s captured forwards, re-run, make the NaN (a finding of one of ``phases``), its note opened by
    ``said`` (its ``{name}``: the other model's; ``{phase}``: the finding's); None where they run clean or cannot be
    re-run."""
    ctx = other._loop_context()
    found = other._rerun(ctx) if ctx is not None else None
    if found is None or found.phase not in phases:
        return None
    name = type(other._inner).__name__
    found.note = f"{said.format(name=name, phase=found.phase)} (module paths are {name}'s). {found.note}".strip()
    return found

