"""A Dataset as one line: its class, its length and, for torch's own datasets, what they hold.

``TensorDataset(1,000) tensor[1000, 784], tensor[1000] i64``, ``Subset(200) of TensorDataset(1,000)``,
``ConcatDataset(3,000) of 3 datasets``; a dataset of the program's own class by its name and ``len``.
Its ``__len__`` is user code, as a DataLoader's length is: asked once per render, and not again for
that class in this process once it was slow (``try_len``). Nothing else of the program runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..format import plural
from ..kinds import torch_attr
from .heads import tensor_head

SLOW_CALL_MS = 50.0
TENSORS_SHOWN = 4  # a TensorDataset's tensors named in its line
_SLOW_LEN: set[type] = set()  # types whose __len__ once took longer than SLOW_CALL_MS: not called again


def try_len(obj: Any, owner: Any = None) -> int | None:
    """``len(obj)``, which may be user code (a Dataset's ``__len__``, which a DataLoader's calls): errors give
    None, and when it was slow once, ``owner``'s type (default: ``obj``'s) is not asked again in this process,
    so one slow call never repeats on every render."""
    key = type(obj if owner is None else owner)
    if key in _SLOW_LEN:
        return None
    start = time.perf_counter()
    try:
        return len(obj)
    except Exception:  # noqa: BLE001 - user code may raise anything
        return None
    finally:
        if (time.perf_counter() - start) * 1000 > SLOW_CALL_MS:
            _SLOW_LEN.add(key)


def sized(kind: str, length: int | None) -> str:
    """``TensorDataset(1,000)``; ``(len ?)`` where the length is not known (an iterable dataset)."""
    return f"{kind}({length:,})" if length is not None else f"{kind}(len ?)"


@dataclass(frozen=True)
class DatasetSummary:
    kind: str
    length: int | None
    holds: tuple[str, ...] = ()  # a TensorDataset's tensors, by their heads
    of: str | None = None  # what a Subset selects from, or how many datasets a ConcatDataset joins

    def __str__(self) -> str:
        text = sized(self.kind, self.length)
        if self.of:
            text += f" of {self.of}"
        return f"{text} {', '.join(self.holds)}" if self.holds else text


def describe_dataset(dataset: Any, _depth: int = 0) -> DatasetSummary:
    """torch's datasets read from the attributes they keep (no ``__len__`` or ``__getitem__`` called); others by
    their ``len``."""
    kind, own = type(dataset).__name__, getattr(dataset, "__dict__", {})
    if _is(dataset, "TensorDataset") and isinstance(own.get("tensors"), tuple):
        tensors = own["tensors"]
        length = _rows(tensors[0]) if tensors else 0
        holds = tuple(tensor_head(t) for t in tensors[:TENSORS_SHOWN])
        more = len(tensors) - TENSORS_SHOWN
        return DatasetSummary(kind, length, holds + ((f"… {more} more",) if more > 0 else ()))
    if _is(dataset, "Subset") and "indices" in own:
        inner = own.get("dataset")
        of = str(describe_dataset(inner, _depth + 1)) if _depth < 2 else type(inner).__name__
        return DatasetSummary(kind, try_len(own["indices"]), of=of)
    if _is(dataset, "ConcatDataset") and isinstance(own.get("cumulative_sizes"), list):
        sizes, parts = own["cumulative_sizes"], own.get("datasets")
        count = len(parts) if isinstance(parts, list) else len(sizes)
        return DatasetSummary(kind, sizes[-1] if sizes else 0, of=plural(count, 'dataset'))
    return DatasetSummary(kind, try_len(dataset))


def _is(dataset: Any, name: str) -> bool:
    cls = torch_attr(f"torch.utils.data.{name}")
    return isinstance(cls, type) and isinstance(dataset, cls)


def _rows(t: Any) -> int | None:
    try:
        return int(t.shape[0])
    except Exception:  # noqa: BLE001 - a 0-d or broken tensor: no rows to count
        return None
