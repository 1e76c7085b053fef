"""The value line VS Code shows for a tensor, module, optimizer, scheduler, loader, grad scaler,
generator or tensor batch.

A renderer over summaries (``describe`` for tensors, ``summary.objects`` for the rest): it
arranges what they computed and never computes statistics itself.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..format import plain_repr, short_error
from ..summary import Budget, TensorSummary, describe
from ..summary import objects as _objects
from ..summary.line import nonfinite_counts, one_line, stats_text
from ..summary.modules import is_uninitialized
from ..summary.heads import tensor_head
from .nodes import LAZY, TEXT_MAX, Child, Info, bound, clip, field_names, tensor_classes

BATCH_ITEMS = 8  # elements of a dict/list batch named in its one-line value

def value_text(obj: Any, kind: str, context: str | None = None, budget: Budget | None = None) -> str | None:
    """The value VS Code shows for ``obj``; None hands it back to pydevd (a batch without tensors).

    ``context`` is DAP's: "clipboard" (Copy Value) gets the full ``repr``, the Debug Console
    ("repl") the summary line followed by the ``repr``; the panel, hover and Watch get the summary.
    """
    if kind == "info":
        return str.__str__(obj)
    if kind == "node":
        return obj.text
    if kind == "stats":
        return stats_line(obj)
    if kind == "batch":  # Copy Value and the console keep pydevd's full container repr
        return None if context in ("clipboard", "repl") else batch_line(obj)
    if context == "clipboard":
        return repr(obj)
    line = summary_line(obj, kind, budget)
    return f"{line}\n{obj!r}" if context == "repl" else line


def summary_line(obj: Any, kind: str, budget: Budget | None = None) -> str:
    if kind == "tensor" and is_uninitialized(obj):
        return f"{tensor_head(obj).replace('[?]', '')} ({LAZY})"
    if kind == "tensor":
        return one_line(describe(obj, budget=budget))
    return str(_objects.describe_object(obj, kind, max_ms=budget.max_ms if budget is not None else None))


def stats_line(s: TensorSummary) -> str:
    """The value of a tensor's ``stats`` child: the numbers, and whether they are exact."""
    if s.error:
        return f"<{s.error}>"
    if not s.has_stats:
        why = next((n for n in s.notes if n in ("meta", "fake")), "empty" if s.numel == 0 else "")
        return f"no values ({why})" if why else "no values"
    tokens = stats_text(s)
    if s.dtype != "torch.bool" and (s.nan is not None or s.nonfinite):
        tokens += [f"{label}={text}" for label, text, _ in nonfinite_counts(s)]
    if s.stats_of not in ("values", "stored values"):  # (a sparse tensor's read "values∈[…]" already)
        tokens.append(f"(of {s.stats_of})")
    if s.sampled:
        tokens.append(f"sampled {s.stats_count:,} of {s.numel:,}")
        tokens.append("range exact" if s.range_exact else "range sampled")
    else:
        tokens.append("exact")
    return " ".join(t for t in tokens if t)


def batch_line(batch: Any) -> str | None:
    """``{'input': tensor[32, 784], 'label': tensor[32] i64}``: a batch's tensors by their heads.

    Nested containers show the same way (a list of ``(x, y)`` batches reads
    ``[(tensor[32, 784], tensor[32] i64), (…), … 98 more]``). None when none of the first items
    holds a tensor, so every other container keeps pydevd's repr.
    """
    tensor_types = tensor_classes()
    if not tensor_types:
        return None
    text = _container_text(batch, tensor_types, 0)
    return clip(text) if text is not None else None


_NESTED = 2  # container levels shown inside a batch line
_ITEM_CHARS = 40  # of a plain element's text in a batch line


def _container_text(batch: Any, tensor_types: tuple, depth: int) -> str | None:
    fields = field_names(type(batch))
    first = _first if depth == 0 else _first_few
    if isinstance(batch, dict):
        items = [(_key(k), v) for k, v in first(batch.items())]
    elif fields is not None:
        items = [(f, v) for f, v in first(zip(fields, batch))]
    elif type(batch) in (list, tuple):
        items = [(None, v) for v in first(batch)]
    else:
        return None
    shown = [(k, _item_text(v, tensor_types, depth)) for k, v in items]
    if not any(holds for _, (_, holds) in shown):
        return None
    parts: list[str] = []
    for k, (text, _) in shown:  # as many as fit on the line; the rest are counted
        part = text if k is None else f"{k}{'=' if fields is not None else ': '}{text}"
        if parts and sum(len(p) + 2 for p in parts) + len(part) > TEXT_MAX - 16:
            break
        parts.append(part)
    if len(batch) > len(parts):
        parts.append(f"… {len(batch) - len(parts)} more")
    open_, close = ("{", "}") if isinstance(batch, dict) else ("[", "]") if isinstance(batch, list) else ("(", ")")
    prefix = "" if fields is None else _type_name(type(batch))
    return prefix + open_ + ", ".join(parts) + ("," if type(batch) is tuple and len(batch) == 1 else "") + close


def _item_text(v: Any, tensor_types: tuple, depth: int) -> tuple[str, bool]:
    """(text, whether it shows a tensor) of one element of a batch."""
    if isinstance(v, tensor_types):
        return tensor_head(v), True
    if depth < _NESTED and (type(v) in (list, tuple) or isinstance(v, dict) or field_names(type(v)) is not None):
        text = _container_text(v, tensor_types, depth + 1)
        if text is not None:
            return text, True
    text = plain_repr(v, _ITEM_CHARS)  # plain values and containers of them (betas=(0.9, 0.99)); no user __repr__
    return (type(v).__name__ if text is None else text), False


def _key(k: Any) -> str:
    """A dict key as the batch line shows it: plain keys by repr (cut as an element is), anything else by type (no
    user __repr__)."""
    text = plain_repr(k, _ITEM_CHARS)
    return type(k).__name__ if text is None else text


def _type_name(type_object: type) -> str:
    """``torch.return_types.max`` as torch's own repr names it; a user's namedtuple by its name."""
    module = getattr(type_object, "__module__", "")
    return f"{module}.{type_object.__name__}" if module == "torch.return_types" else type_object.__name__


def _first(iterable: Any) -> list:
    return list(itertools.islice(iterable, BATCH_ITEMS))


def _first_few(iterable: Any) -> list:
    return list(itertools.islice(iterable, BATCH_ITEMS // 2))


def fallback_text(obj: Any, exc: BaseException) -> str:
    """What a value shows when its view failed: still names the value, and says why."""
    try:
        tensor_types = tensor_classes()
        head = tensor_head(obj) if tensor_types and isinstance(obj, tensor_types) else type(obj).__name__
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        head = "?"
    return f"{head} (tensor_dap could not render this value: {short_error(exc)})"


def fallback_children(obj: Any, exc: BaseException) -> list[Child]:
    """Children of a value whose view failed: the error, then whatever metadata still reads."""
    children: list[Child] = [("error", Info(short_error(exc)), None)]
    for name in ("shape", "dtype", "device"):
        try:
            children.append((name, Info(str(getattr(obj, name))), bound("." + name)))
        except Exception:  # noqa: BLE001, S110 - metadata of a broken value may raise anything
            pass
    return children
