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
from ..summary.objects import object_kind

EvalName = Union[str, Callable[[str], str], None]
Child = tuple[str, Any, EvalName]

TEXT_MAX = 240  # longest preview / batch line shown in the panel
PAGE = 100  # the most children one node shows; more go behind a "… N more" node
LAZY = "lazy: materialized by the first forward"


class Info(str):
    """A leaf shown as plain text: a str subclass, so pydevd shows it without quotes or children."""

    __slots__ = ()


class Node:
    """An expandable display-only node: a value line and its own children (a list, or a function making it
    when the node is expanded, so a page of a huge container costs nothing until it is opened)."""

    __slots__ = ("_children", "text")

    def __init__(self, text: str, children: list[Child] | Callable[[], list[Child]]) -> None:
        self.text = text
        self._children = children

    @property
    def children(self) -> list[Child]:
        return list(self._children() if callable(self._children) else self._children)

    def __repr__(self) -> str:
        return self.text


def tensor_classes() -> tuple[type, ...]:
    tensor = torch_attr("torch.Tensor")
    return (tensor,) if isinstance(tensor, type) else ()


def kind_of(type_object: type) -> str | None:
    """Which view renders values of this type: a kind name, or None for pydevd's default."""
    if not isinstance(type_object, type):
        return None
    if issubclass(type_object, Info):
        return "info"
    if issubclass(type_object, (Node, TensorSummary)):
        return "node" if issubclass(type_object, Node) else "stats"
    tensors = tensor_classes()
    if tensors and issubclass(type_object, tensors):
        return "tensor"
    kind = object_kind(type_object)
    if kind is not None:
        return kind
    if type_object in (list, tuple) or issubclass(type_object, dict) or field_names(type_object) is not None:
        return "batch"
    return None


def expandable(kind: str | None) -> bool:
    """Kinds whose children this view provides (leaves, batches, datasets and generators keep pydevd's own
    handling: a dataset's attributes are its children)."""
    return kind is not None and kind not in ("info", "batch", "generator", "dataset")


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


def paged(count: int, entry: Callable[[int, int], list[Child]], start: int = 0, stop: int | None = None) -> list[Child]:
    """Children ``start..stop`` of a container of ``count`` entries, at most PAGE of them at any level.

    ``entry(a, b)`` makes children ``a..b-1``. Up to PAGE entries are shown as they are; past the first
    PAGE, the rest sits behind a "… N more" node, which opens into ranges ``[a..b]`` (each at most
    PAGE entries, or PAGE ranges of them), so expanding a 20,000-entry list renders 100 values, not 20,000.
    """
    stop = count if stop is None else stop
    if stop - start <= PAGE:
        return entry(start, stop)
    if start == 0:
        rest = Node(f"entries {PAGE:,}–{stop - 1:,}", lambda: _ranges(PAGE, stop, count, entry))
        return entry(0, PAGE) + [(f"… {stop - PAGE:,} more", rest, _same)]
    return _ranges(start, stop, count, entry)


def _ranges(start: int, stop: int, count: int, entry: Callable[[int, int], list[Child]]) -> list[Child]:
    size = PAGE
    while (stop - start) > size * PAGE:
        size *= PAGE
    out: list[Child] = []
    for a in range(start, stop, size):
        b = min(stop, a + size)
        node = Node(f"{b - a:,} entries", lambda a=a, b=b: paged(count, entry, a, b))
        out.append((f"[{a}..{b - 1}]", node, _same))
    return out


def _same(parent: str) -> str:
    """A grouping node's Watch expression is its container's: the entries inside keep their own suffixes."""
    return parent
