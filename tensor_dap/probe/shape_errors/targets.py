"""A loss's targets that do not fit its scores: the shape or type the loss reads them as, and the usual fix.

``cross_entropy`` reads scores of three dims or more as ``[batch, classes, ...]``: a sequence model's
``[batch, time, classes]`` logits give "Expected target size [8, 1000], got [8, 20]" (20 time steps taken for the
classes). ``binary_cross_entropy_with_logits`` wants targets of its scores' shape ("Target size (torch.Size([8]))
must be the same as input size (torch.Size([8, 1]))"). Integer targets of the scores' shape are read as class
probabilities ("Expected floating point type for target with class probabilities, got Long": one-hot labels).
"""

from __future__ import annotations

import re

from ...format import fmt_shape, parse_shape
from .model import Operand

_TARGET_SIZE = re.compile(r"Expected target size \[([\d, ]*)\], got \[([\d, ]*)\]")
_SAME_SIZE = re.compile(r"Target size \(torch\.Size\(\[([\d, ]*)\]\)\) must be the same as input size "
                        r"\(torch\.Size\(\[([\d, ]*)\]\)\)")


def target_hint(operands: list[Operand], message: str) -> str:
    """The hint for the family ``loss targets``; '' when the operands do not show it."""
    tensors = [o for o in operands if o.kind == "tensor" and o.shape is not None]
    found = _TARGET_SIZE.search(message)
    if found:
        return _classes_on_dim_1(tensors, parse_shape(found.group(1)), parse_shape(found.group(2)))
    found = _SAME_SIZE.search(message)
    if found:
        return _same_shape(tensors, parse_shape(found.group(1)), parse_shape(found.group(2)))
    if "target with class probabilities" in message:
        target = next((o for o in tensors[1:] if o.shape == tensors[0].shape), None) if tensors else None
        if target is None:
            return ""
        return (f"{target.expr} {fmt_shape(target.shape)} has the scores' shape, so cross_entropy reads it as class "
                f"probabilities, which are floats: for one-hot labels pass the class ids, {target.expr}.argmax(1); "
                f"for soft labels, {target.expr}.float()")
    return ""


def _classes_on_dim_1(tensors: list[Operand], expected: tuple[int, ...], got: tuple[int, ...]) -> str:
    scores = next((o for o in tensors if len(o.shape or ()) >= 3), None)
    target = next((o for o in tensors if o is not scores and o.shape == got), None)
    if scores is None or scores.shape is None:
        return ""
    shape = scores.shape
    said = (f"{scores.expr} {fmt_shape(shape)} is read as [batch, classes, ...]: {shape[1]} classes on dim 1, so the "
            f"targets must be {fmt_shape(expected)}")
    if len(shape) == 3 and got == shape[:2]:  # [batch, time, classes] logits and [batch, time] targets
        name = target.expr if target is not None else "targets"
        return (f"{said}, but {name} is {fmt_shape(got)}: the classes are the last dim. Move them to dim 1, "
                f"cross_entropy({scores.expr}.transpose(1, 2), {name}), or flatten both, "
                f"cross_entropy({scores.expr}.reshape(-1, {shape[-1]}), {name}.reshape(-1))")
    return f"{said} (one class id per position), not {fmt_shape(got)}"


def _same_shape(tensors: list[Operand], target_shape: tuple[int, ...], input_shape: tuple[int, ...]) -> str:
    scores = next((o for o in tensors if o.shape == input_shape), None)
    target = next((o for o in tensors if o.shape == target_shape and o is not scores), None)
    s = scores.expr if scores is not None else "the scores"
    t = target.expr if target is not None else "the targets"
    said = f"{t} {fmt_shape(target_shape)} and {s} {fmt_shape(input_shape)} must have one shape"
    if input_shape == (*target_shape, 1):
        return f"{said}: drop the scores' last dim, {s}.squeeze(-1), or give the targets one, {t}.unsqueeze(-1)"
    if target_shape == (*input_shape, 1):
        return f"{said}: drop the targets' last dim, {t}.squeeze(-1)"
    return f"{said} (one 0/1 target per score)"
