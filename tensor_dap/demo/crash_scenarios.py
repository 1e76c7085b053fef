"""The planted bugs that crash with a message that names no tensor: the crash report of ``tensor-dap run`` names it.

Binary cross-entropy handed the head's raw scores (the model has no sigmoid): torch says only that "all elements of
input should be between 0 and 1"; the report names the operand, its range and ``BCEWithLogitsLoss``.
"""

from __future__ import annotations

from .scenario import Context, Outcome
from .train import CLASSES, DemoNet, batches


def bce_on_logits(ctx: Context) -> Outcome:
    """``nn.BCELoss`` of the head's logits: what the crash report (the one ``tensor-dap run`` prints) says."""
    import torch.nn.functional as F
    from torch import nn

    from ..debug.crash import build_report

    model, loss_fn = DemoNet(), nn.BCELoss()
    x, y = next(batches(1, bug=False))
    targets = F.one_hot(y, CLASSES).float()
    scores = model(x)
    try:
        loss_fn(scores, targets)  # BUG: the head gives logits: BCEWithLogitsLoss, or a sigmoid first
    except RuntimeError as exc:
        report = build_report(exc)
        torch_said = "torch said: " + str(exc).split("\n")[0]
    else:
        return Outcome(False, ["BCELoss did not fail"])
    explanation = report.explanation
    hint = explanation.frames[-1].hint if explanation is not None and explanation.frames else ""
    caught = hint.startswith("`scores` [32, 4] holds") and "nn.BCEWithLogitsLoss()" in hint
    found = hint.split(": binary")[0] + ": use BCEWithLogitsLoss" if caught else "nothing said"
    from ..debug.views import explanation as shown

    return Outcome(caught, [found, torch_said], shown=[shown(explanation)] if explanation is not None else [])
