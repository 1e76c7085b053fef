"""Which dataset samples made the batch a DataLoader last handed out: what turns "row 3 of the batch holds NaN" into
"dataset index 137", the record to fix.

While a watch is open (``follow``, counted), each DataLoader iterator notes the indices it asks its sampler for
(``_next_index``, in the main process, workers or not) by the batch they make, counted from the iterator's start
(workers are asked ahead: an iterator made before the watch opened, as ``tensor-dap run`` attaches it at the first
forward, has batches in flight whose indices were never noted, and those get none rather than another batch's), and
pairs a batch with its own as it hands it out. Batches come out in the order their indices were asked
(``in_order=True``, the default); a loader reset for a new epoch forgets what it had asked. The last two batches are
kept (a wrapper may fetch one ahead of the one it hands the loop: accelerate's DataLoaderShard), each one's tensors
strongly when they are ``KEEP_BYTES`` or less in all (a batch moved to the GPU lets go of its CPU copy, and the rows
are still told from it), weakly otherwise. An iterable-style dataset has no indices, nor a loader without automatic
batching one per row: neither is noted.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any, Callable

from .nested import walk

KEEP_BYTES = 64 << 20
_QUEUE = "_tensor_dap_indices"  # an iterator's {batch number: its dataset indices}, or False
_IN_FLIGHT = 64  # batches asked ahead and kept at most (workers × prefetch_factor, with room)
_followers = [0]
_restore: list[tuple[Any, str, Any]] = []
# (the dataset indices of each of the last batches, [their tensors, or weak references to them]): two, since a
# wrapper may fetch one batch ahead of the one it hands the loop (accelerate's DataLoaderShard)
_last: deque[tuple[Any, list[Any]]] = deque(maxlen=2)


class Following:
    """Returned by ``follow``: ``remove()`` stops (as a hook's handle does)."""

    def __init__(self, on: bool) -> None:
        self._on = on

    def remove(self) -> None:
        if not self._on:
            return
        self._on = False
        _followers[0] -= 1
        if not _followers[0]:
            for owner, name, original in reversed(_restore):
                setattr(owner, name, original)
            _restore.clear()
            _last.clear()


def follow() -> Following:
    """Note the DataLoader batches' indices until the handle's ``remove()`` (never raises)."""
    try:
        if not _followers[0]:
            _install()
        _followers[0] += 1
    except Exception:  # noqa: BLE001 - a torch without these internals: nothing is noted
        return Following(False)
    return Following(True)


def _install() -> None:
    from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

    next_index, next_batch, reset = (_BaseDataLoaderIter._next_index, _BaseDataLoaderIter.__next__,
                                     _BaseDataLoaderIter._reset)

    def noted_index(self: Any) -> Any:
        index = next_index(self)
        asked = self.__dict__.get(_QUEUE)
        if asked is None:  # (once an iterator: whether its batches have indices, one per row)
            mapped = self._dataset_kind == _DatasetKind.Map and getattr(self, "_auto_collation", False) and \
                getattr(self, "_in_order", True)
            asked = self.__dict__[_QUEUE] = {} if mapped else False
        if asked is not False:
            # Which batch these indices make, counted from the iterator's start, not from ours: workers are asked
            # ahead (``_send_idx``, before it counts this one), so an iterator made before the watch opened has
            # batches in flight whose indices were never noted; with no workers, the batch being fetched.
            sent = getattr(self, "_send_idx", None)
            asked[sent if isinstance(sent, int) else self._num_yielded] = index
            if len(asked) > _IN_FLIGHT:
                del asked[next(iter(asked))]
        return index

    def noted_batch(self: Any) -> Any:
        batch = next_batch(self)
        asked = self.__dict__.get(_QUEUE)
        if asked:
            try:
                indices = asked.pop(self._num_yielded - 1, None)  # (counted once the batch was handed out)
                if indices is not None:
                    _remember(indices, batch)
            except Exception:  # noqa: BLE001 - noting must never break the loader
                _last.clear()
        return batch

    def forgetting_reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.pop(_QUEUE, None)
        return reset(self, *args, **kwargs)

    for name, fn in (("_next_index", noted_index), ("__next__", noted_batch), ("_reset", forgetting_reset)):
        _restore.append((_BaseDataLoaderIter, name, getattr(_BaseDataLoaderIter, name)))
        setattr(_BaseDataLoaderIter, name, fn)


def _remember(indices: Any, batch: Any) -> None:
    """The batch just handed out, made from ``indices``: its tensors with a row per index (a tuple or list of
    tensors, the usual batch, is read without the general walk)."""
    from torch import Tensor

    n = len(indices)
    parts = batch if type(batch) in (tuple, list) else [t for _, t in walk(batch, limit=64)]
    tensors = [t for t in parts if isinstance(t, Tensor) and t.dim() and t.shape[0] == n]
    size = sum(t.numel() * t.element_size() for t in tensors)
    _last.append((indices, tensors if size <= KEEP_BYTES else [weakref.ref(t) for t in tensors]))


def dataset_rows(t: Any, rows: list[int], bad_rows: Callable[[Any], list[int] | None]) -> list[Any] | None:
    """The dataset indices of ``rows`` of ``t`` when ``t`` is a tensor of one of the last batches, or a copy of one
    (the same shape, and ``bad_rows`` of it gives ``rows``: a batch moved to the GPU); None otherwise."""
    if not rows:
        return None
    try:
        for indices, kept in reversed(_last):
            if t.dim() == 0 or t.shape[0] != len(indices):
                continue
            for held in kept:
                b = held() if isinstance(held, weakref.ref) else held
                if b is not None and (b is t or (b.shape == t.shape and bad_rows(b) == rows)):
                    return [indices[r] for r in rows]
    except Exception:  # noqa: BLE001 - a report says less, never fails
        return None
    return None
