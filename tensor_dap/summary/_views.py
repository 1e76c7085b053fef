"""Views the stats pass walks: the distinct elements behind a broadcast, chunks on demand, even samples.

A tensor's logical size can dwarf its storage: ``ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048)``
has 2^31 elements over 65,536 stored ones, and ``unfold``/``as_strided`` views read the same
element many times. Everything here is metadata arithmetic and views: nothing copies data, and
nothing is built in proportion to the logical size, so a summary's cost follows its budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

import torch


@dataclass(frozen=True)
class Reached:
    """The elements a strided view reaches, and how often it reads each."""

    data: torch.Tensor  # the view with its broadcast (stride-0) dims dropped
    repeat: int  # how many times the view reads each element of ``data`` (1 unless expanded)
    overlapping: bool  # elements of ``data`` may share storage: per-element multiplicities are unknown
    span: Optional[torch.Tensor]  # overlapping without gaps: the 1-D storage slice holding exactly its elements


def reached(x: torch.Tensor) -> Reached:
    """What ``x`` reads from its storage.

    A dim of stride 0 repeats everything below it, so dropping it leaves the same elements,
    each read ``size`` times more: the stats of an expanded view are its storage's, with every
    count multiplied by the product of the broadcast sizes (uniform weights, so the mean and the
    population variance are unchanged). The rest either reads each element once (counted as is)
    or overlaps (unfold, as_strided), where only a sample can be weighed right.
    """
    if x.dim() == 0 or x.numel() == 0:
        return Reached(x, 1, False, None)
    index: List[Any] = []
    repeat = 1
    for size, stride in zip(x.shape, x.stride()):
        if stride == 0 and size > 1:
            index.append(0)
            repeat *= int(size)
        else:
            index.append(slice(None))
    data = x[tuple(index)] if repeat > 1 else x
    dims = sorted((int(st), int(n)) for n, st in zip(data.shape, data.stride()) if n > 1)
    extent, overlapping, covering = 1, False, bool(dims) and dims[0][0] == 1
    for stride, size in dims:
        overlapping = overlapping or stride < extent
        covering = covering and stride <= extent
        extent += (size - 1) * stride
    span = None
    if overlapping and covering:
        span = torch.empty(0, dtype=data.dtype, device=data.device).set_(
            data.untyped_storage(), data.storage_offset(), (extent,))
    return Reached(data, repeat, overlapping, span)


def memory_order(x: torch.Tensor) -> torch.Tensor:
    """The same elements with dims permuted into memory order and mergeable dims merged (stats ignore order).

    A transposed or channels-last tensor becomes contiguous again, and a sliced one becomes as
    few strided runs as its layout allows, so it is walked linearly.
    """
    if x.dim() < 2 or x.is_contiguous():
        return x
    dims = sorted(((int(st), int(n)) for n, st in zip(x.shape, x.stride()) if n != 1), reverse=True)
    sizes: List[int] = []
    strides: List[int] = []
    for stride, size in dims:
        if strides and strides[-1] == stride * size:
            sizes[-1] *= size
            strides[-1] = stride
        else:
            sizes.append(size)
            strides.append(stride)
    return x.as_strided(sizes, strides, x.storage_offset()) if sizes else x.reshape(())


class Chunks:
    """Views of about ``size`` elements each, made on demand: chunk ``i`` costs the same whatever ``len`` is.

    ``reorder=False`` keeps the tensor's own dims and only slices it (quantized tensors cannot be
    re-strided).
    """

    def __init__(self, x: torch.Tensor, size: int, reorder: bool = True) -> None:
        self.size = max(1, size)
        self.reorder = reorder
        self.x = memory_order(x) if reorder else x
        self._inner: Optional[Chunks] = None
        numel = self.x.numel()
        if numel == 0:
            self.mode, self.count = "none", 0
        elif reorder and self.x.is_contiguous():
            self.mode, self.count = "flat", -(-numel // self.size)
        elif numel <= self.size or self.x.dim() == 0:
            self.mode, self.count = "whole", 1
        else:
            row = numel // self.x.shape[0]
            if row >= self.size:
                self.mode = "rows"
                self.per = len(Chunks(self.x[0], self.size, reorder))
                self.count = self.x.shape[0] * self.per
            else:
                self.mode = "blocks"
                self.step = max(1, self.size // row)
                self.count = -(-self.x.shape[0] // self.step)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.mode == "flat":
            return self.x.view(-1)[i * self.size:(i + 1) * self.size]
        if self.mode == "whole":
            return self.x
        if self.mode == "blocks":
            return self.x[i * self.step:(i + 1) * self.step]
        row, within = divmod(i, self.per)
        if self._inner is None or self._row != row:
            self._inner, self._row = Chunks(self.x[row], self.size, self.reorder), row
        return self._inner[within]


def spread(n: int) -> Iterator[int]:
    """0..n-1 in bit-reversed order: any prefix is spread evenly over the range (a cut-short pass
    still samples the whole tensor, not just its start)."""
    if n <= 0:
        return
    bits = max(1, (n - 1).bit_length())
    for i in range(1 << bits):
        j = int(format(i, f"0{bits}b")[::-1], 2)
        if j < n:
            yield j


def sample_view(x: torch.Tensor, limit: int) -> torch.Tensor:
    """A strided view of at most about ``limit`` elements spread over the whole tensor (no copy)."""
    if x.dim() == 0 or x.numel() <= limit:
        return x
    steps = [1] * x.dim()
    counts = list(x.shape)
    while math.prod(counts) > limit:
        i = max(range(len(counts)), key=lambda k: counts[k])
        steps[i] *= 2
        counts[i] = -(-x.shape[i] // steps[i])
    return x[tuple(slice(None, None, s) for s in steps)]
