"""Where a NaN/Inf was born: the op, its module and line, and what it was given (the data every report is built from).

``origin``'s tracker makes them as a re-run goes; ``loss_graph`` reads them from a loss's autograd graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..debug.frames import SourceLine
from ..summary.transformed import plain


def module_label(path: str, typ: str | None = None) -> str:
    """A module's dotted path as reports show it; the root has none: named by its class ("GAT, the model itself")."""
    if path:
        return path
    return f"{typ}, the model itself" if typ else "the model itself"


@dataclass
class Birth:
    """One op that produced the first NaN (or Inf) of a lineage. Live references, for the report and the debugger."""

    phase: str  # "forward", "backward", "input" (the batch itself), "loss" (outside any module, after the model)
    op: str | None  # "softmax", "SqrtBackward0"; for "input", the first op that consumed the batch
    kind: str  # "nan" or "inf"
    module: str | None = None  # dotted path of the innermost module running the op; None: outside any module
    module_type: str | None = None
    line: SourceLine | None = None
    forward_op: str | None = None  # backward births: the forward op that created the node ("sqrt")
    inputs: list[tuple[str, Any]] = field(default_factory=list)  # the op's tensor inputs (backward: grad_output)
    output: Any = None  # the op's output (backward: grad_input)
    cause: Birth | None = None  # a NaN born from an Inf: the Inf's birth (e.g. masked_fill before softmax)
    deliberate: bool = False  # an Inf put there on purpose (a -inf mask), not a bug by itself
    # a loss's op the unchanged loop read from the loss's graph, whose own line is not known: ``line`` is the
    # backward() call after it ("before": the op is in the loss computed before that line), or the model's call
    # before it ("after"); None: ``line`` is the op's own
    near: str | None = None
    note: str = ""
    saved: dict[str, Any] = field(default_factory=dict)  # backward: what the node saved from its forward (sqrt: result)
    made_by: tuple[str, ...] = ()  # the forward ops that made the op's first input, nearest first: ("rsub", "sigmoid")
    # a backward the program wrote (a custom autograd.Function's): the op in it that made the value, at its own line
    inside: Birth | None = None
    # a backward op read from a freed graph's structure (no values): whether the loss computation has an op that hides
    # values from the forward (torch.where, indexing, masked_fill), where a NaN can sit unseen; None: not known
    hidden: bool | None = None


class Born(Exception):
    """Raised to stop a re-run at a birth that matters (by the tracker, or by a replay that sees one itself)."""

    def __init__(self, birth: Birth) -> None:
        super().__init__(birth.op or birth.phase)
        self.birth = birth


def input_tensors(named: list[tuple[str, Any]]) -> list[torch.Tensor]:
    """The tensors among an op's named inputs (a ``Birth``'s): the numbers and flags left out."""
    return [t for _, t in named if isinstance(t, torch.Tensor)]


def storage_of(t: torch.Tensor) -> int | None:
    """Where ``t``'s memory is, shared by its aliases (``buffer.data``); None for a tensor without storage."""
    try:
        return t.untyped_storage().data_ptr() if t.layout == torch.strided and t.device.type != "meta" else None
    except (RuntimeError, NotImplementedError):  # a torch.func wrapper, a subclass with no storage of its own
        return None


def outlive_transforms(birth: Birth) -> None:
    """Keep, in ``birth`` and the births behind it, the plain tensors under torch.func's wrappers: an op inside vmap
    or grad (DP-SGD's per-sample forward) made its tensors there, and they die with the transform, before the
    diagnosis and the debugger read them."""
    for b in (birth, birth.cause, birth.inside):
        if b is not None:
            b.inputs = [(name, plain(t)) for name, t in b.inputs]
            b.output, b.saved = plain(b.output), {k: plain(v) for k, v in b.saved.items()}


def root(birth: Birth) -> Birth:
    """The first accidental birth behind ``birth``: a NaN from an accidental Inf goes back to that Inf."""
    while birth.cause is not None and not birth.cause.deliberate:
        birth = birth.cause
    return birth


def op_at(birth: Birth) -> str:
    """``div at model.py:141 (return grad / x)``: the op and the user's line with its code, as reports say them."""
    line = birth.line
    if line is None:
        return birth.op or "?"
    code = line.code
    return f"{birth.op or '?'} at {line}" + (f" ({code})" if code else "")


def masks(cause: Birth) -> str:
    """``masked_fill at a.py:86, after masked_fill at a.py:84``: the op that made the Inf, and the deliberate ones
    before it (a padding mask over a causal one: together they leave a row with nothing)."""
    said, seen = [], 0
    while cause is not None and seen < 3:
        said.append(f"{cause.op}" + (f" at {cause.line}" if cause.line else ""))
        cause, seen = cause.cause if cause.deliberate else None, seen + 1
    return ", after ".join(said)
