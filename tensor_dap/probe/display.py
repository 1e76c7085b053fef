"""What ``p``, ``pp``, ``display`` and bare expressions show for a value.

A tensor becomes its one-line summary; a module, optimizer, LR scheduler, DataLoader, grad
scaler or generator the one line VS Code shows for it; a container holding tensors (dict,
list, tuple, namedtuple, dataclass, a batch mapping) one line per element. Anything else
returns None so the debugger keeps pdb's own repr: non-tensor output never changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..format import plain_repr, plural
from ..kinds import is_module, is_tensor
from ..nested import children, holds_tensor, walk
from ..summary import TensorSummary, describe
from ..summary.objects import describe_object

MAX_ROWS = 64  # a huge list of tensors is summarized, not dumped
MAX_DEPTH = 3
_WALK_LIMIT = 100_000  # containers visited for one view: a huge list is cut, not walked whole
_REPR_CHARS = 80
OBJECT_MS = 200.0  # a module or optimizer summary walks its tensors for at most this long at the prompt


@dataclasses.dataclass(frozen=True)
class TensorView:
    """The summarized form of one value: a single tensor, or a container's elements."""

    title: str  # "" for a single tensor, else e.g. "dict, 3 items"
    rows: tuple[tuple[str, TensorSummary | str], ...]  # (key, summary or short repr)
    more: int = 0  # elements left out past MAX_ROWS
    line: str | None = None  # a module's, optimizer's, ... one-line summary (then rows are empty)

    @property
    def single(self) -> TensorSummary | None:
        if not self.title and len(self.rows) == 1 and isinstance(self.rows[0][1], TensorSummary):
            return self.rows[0][1]
        return None


def short_repr(value: Any) -> str:
    """repr, cut to one short line; never raises. Plain values and containers of them are written only as far as
    the line shows (a list of a million strings in a batch costs one line, not its whole repr); other objects by
    their own ``__repr__``, as pdb shows them."""
    text = plain_repr(value, _REPR_CHARS, other=_own_repr) or _own_repr(value)
    text = " ".join(text.split())
    return text if len(text) <= _REPR_CHARS else text[:_REPR_CHARS - 1] + "…"


def _own_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not break the view
        return f"<repr failed: {type(exc).__name__}>"


def _flatten(value: Any) -> Any:
    """(key, leaf) down to the tensors: containers that hold no tensor are leaves, shown by their repr."""
    return walk(value, is_leaf=lambda v: is_tensor(v) or not holds_tensor(v, MAX_DEPTH), max_depth=MAX_DEPTH,
                keep_unexpanded=True, limit=_WALK_LIMIT)


def _title(value: Any, count: int) -> str:
    return f"{type(value).__name__}, {plural(count, 'item')}"


def tensor_view(value: Any) -> TensorView | None:
    """The summarized form of ``value``, or None when pdb's repr should be used unchanged."""
    if is_tensor(value):
        return TensorView(title="", rows=(("", describe(value)),))
    summary = describe_object(value, max_ms=OBJECT_MS)
    if summary is not None:
        return TensorView(title="", rows=(), line=str(summary))
    if is_module(value) or not holds_tensor(value, MAX_DEPTH):
        return None
    rows: list[tuple[str, TensorSummary | str]] = []
    total = 0
    for key, leaf in _flatten(value):
        total += 1
        if len(rows) < MAX_ROWS:
            rows.append((key, describe(leaf) if is_tensor(leaf) else short_repr(leaf)))
    return TensorView(title=_title(value, _length(value)), rows=tuple(rows), more=total - len(rows))


def _length(value: Any) -> int:
    try:
        return len(value)
    except Exception:  # noqa: BLE001 - a dataclass, or an odd container
        return sum(1 for _ in children(value) or ())
