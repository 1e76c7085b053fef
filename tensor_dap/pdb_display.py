"""What ``p``, ``pp``, ``display`` and bare expressions show for a value.

A tensor becomes its one-line summary; a container holding tensors (dict, list, tuple,
namedtuple, dataclass, a batch mapping) becomes one line per element. Anything else
returns None so the debugger keeps pdb's own repr: non-tensor output never changes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from .summary import TensorSummary, describe

MAX_ROWS = 64  # a huge list of tensors is summarized, not dumped
MAX_DEPTH = 3
_REPR_CHARS = 80


def is_tensor(value: Any) -> bool:
    """True for a torch.Tensor, without importing torch when the program never did."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_module(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


@dataclasses.dataclass(frozen=True)
class TensorView:
    """The summarized form of one value: a single tensor, or a container's elements."""

    title: str  # "" for a single tensor, else e.g. "dict, 3 items"
    rows: tuple[tuple[str, TensorSummary | str], ...]  # (key, summary or short repr)
    more: int = 0  # elements left out past MAX_ROWS

    @property
    def single(self) -> TensorSummary | None:
        if not self.title and len(self.rows) == 1 and isinstance(self.rows[0][1], TensorSummary):
            return self.rows[0][1]
        return None


def container_items(value: Any) -> list[tuple[str, Any]] | None:
    """(key text, child) for a container we unfold, else None."""
    if isinstance(value, Mapping):
        try:
            return [(f"[{k!r}]", v) for k, v in value.items()]
        except Exception:
            return None
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return [(f".{f}", getattr(value, f)) for f in value._fields]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    return None


def holds_tensor(value: Any, depth: int = 0, _budget: list[int] | None = None) -> bool:
    """True if ``value`` is a tensor or a container with one inside (bounded walk)."""
    budget = _budget if _budget is not None else [1000]
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if is_tensor(value):
        return True
    if depth >= MAX_DEPTH or is_module(value):
        return False
    children = container_items(value)
    return bool(children) and any(holds_tensor(v, depth + 1, budget) for _, v in children)


def short_repr(value: Any) -> str:
    """repr, cut to one short line; never raises."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr failed: {type(exc).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= _REPR_CHARS else text[:_REPR_CHARS - 3] + "..."


def _flatten(value: Any, prefix: str, depth: int) -> Iterator[tuple[str, Any]]:
    children = container_items(value) if depth < MAX_DEPTH and not is_tensor(value) else None
    if children is None or not holds_tensor(value):
        yield prefix, value
        return
    for key, child in children:
        yield from _flatten(child, prefix + key, depth + 1)


def _title(value: Any, count: int) -> str:
    return f"{type(value).__name__}, {count} item{'s' if count != 1 else ''}"


def tensor_view(value: Any) -> TensorView | None:
    """The summarized form of ``value``, or None when pdb's repr should be used unchanged."""
    if is_tensor(value):
        return TensorView(title="", rows=(("", describe(value)),))
    if is_module(value) or not holds_tensor(value):
        return None
    rows: list[tuple[str, TensorSummary | str]] = []
    total = 0
    for key, leaf in _flatten(value, "", 0):
        total += 1
        if len(rows) < MAX_ROWS:
            rows.append((key, describe(leaf) if is_tensor(leaf) else short_repr(leaf)))
    children = container_items(value) or []
    return TensorView(title=_title(value, len(children)), rows=tuple(rows), more=total - len(rows))
