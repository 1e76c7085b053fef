"""The display nodes of the Variables panel, and which view renders which type.

Children are ``(name, value, evaluate_name)`` triples in display order, exactly what pydevd's
``get_contents_debug_adapter_protocol`` returns: ``evaluate_name`` is a suffix appended to the
parent's expression (".shape"), a function of the parent's expression, or None.

Nothing here imports torch: the debugpy plugin asks ``kind_of`` for every type it meets, in
programs that may never import torch, and torch's classes are found in ``sys.modules``.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Union

from ..kinds import torch_attr
from ..summary import TensorSummary

EvalName = Union[str, Callable[[str], str], None]
Child = tuple[str, Any, EvalName]

TEXT_MAX = 240  # longest preview / batch line shown in the panel
LAZY = "lazy: materialized by the first forward"


class Info(str):
    """A leaf shown as plain text: a str subclass, so pydevd shows it without quotes or children."""

    __slots__ = ()


class Node:
    """An expandable display-only node: a value line and its own children."""

    __slots__ = ("children", "text")

    def __init__(self, text: str, children: list[Child]) -> None:
        self.text = text
        self.children = children

    def __repr__(self) -> str:
        return self.text


# kind -> the torch classes it renders, checked in this order
_KIND_CLASSES = {
    "tensor": ("torch.Tensor",),
    "module": ("torch.nn.Module",),
    "optimizer": ("torch.optim.Optimizer",),
    "scheduler": ("torch.optim.lr_scheduler.LRScheduler", "torch.optim.lr_scheduler._LRScheduler",
                  "torch.optim.lr_scheduler.ReduceLROnPlateau"),
    "loader": ("torch.utils.data.DataLoader",),
}


def torch_classes(kind: str) -> tuple[type, ...]:
    return tuple(c for c in (torch_attr(p) for p in _KIND_CLASSES[kind]) if isinstance(c, type))


def kind_of(type_object: type) -> str | None:
    """Which view renders values of this type: a kind name, or None for pydevd's default."""
    if not isinstance(type_object, type):
        return None
    if issubclass(type_object, Info):
        return "info"
    if issubclass(type_object, (Node, TensorSummary)):
        return "node" if issubclass(type_object, Node) else "stats"
    for kind in _KIND_CLASSES:
        classes = torch_classes(kind)
        if classes and issubclass(type_object, classes):
            return kind
    if type_object in (list, tuple) or issubclass(type_object, dict) or field_names(type_object) is not None:
        return "batch"
    return None


def expandable(kind: str | None) -> bool:
    """Kinds whose children this view provides (leaves and batches keep pydevd's own handling)."""
    return kind is not None and kind not in ("info", "batch")


def field_names(type_object: type) -> tuple[str, ...] | None:
    """A namedtuple's fields, or a structseq's (``torch.return_types.max``: values, indices); else None."""
    if not issubclass(type_object, tuple):
        return None
    fields = getattr(type_object, "_fields", None)
    if fields is None and hasattr(type_object, "n_sequence_fields"):
        fields = getattr(type_object, "__match_args__", None)  # structseq field names (Python 3.10+)
    return tuple(fields) if isinstance(fields, tuple) else None


def bound(evaluate_name: EvalName) -> EvalName:
    """pydevd appends a child's suffix to the parent's expression as text: `weight - weight.grad` +
    `.shape` would watch `weight.grad.shape`'s difference. Parenthesize a parent that is not one operand."""
    if evaluate_name is None or evaluate_name == "":
        return evaluate_name
    if callable(evaluate_name):
        return lambda parent: evaluate_name(operand(parent))
    return lambda parent: operand(parent) + evaluate_name


def operand(expression: str) -> str:
    """``expression`` as one operand: names, attributes, subscripts and calls as they are, the rest in parentheses."""
    try:
        node = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        return f"({expression})"
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Dict)):
        return expression
    return f"({expression})"


def clip(text: str) -> str:
    return text if len(text) <= TEXT_MAX else text[:TEXT_MAX - 1] + "…"
