"""A small histogram of a tensor's finite values, for the ``stats`` view and the tensor inspector.

Computed here, drawn by a renderer. Its cost is bounded whatever the tensor, like a summary's
(``_stats``, ``_views``): at most ``sample`` values are counted, read from the distinct elements
behind the view (a broadcast view's storage, each count times its repeats; the storage span an
overlapping unfold/as_strided view covers) through strided views, never a copy of the whole
tensor; they are converted in small chunks, spread over the tensor, and the deadline is checked
before every chunk. A histogram of fewer values than the tensor holds says it is sampled.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

BINS = 12
SAMPLE = 2**18  # values counted at most: their float copies stay about a MiB whatever the tensor
MAX_MS = 30.0
_CHUNK = 2**16
_RUN = 1024  # contiguous elements read together when sampling a contiguous tensor


@dataclass(frozen=True)
class Histogram:
    edges: tuple[float, ...]  # len(counts) + 1 bin edges, ascending
    counts: tuple[int, ...]
    total: int  # finite values counted
    nonfinite: int  # NaN/Inf values left out
    sampled: bool
    integer: bool  # one bin per integer value (labels, token ids)


def histogram(x: Any, *, bins: int = BINS, sample: int = SAMPLE, max_ms: Optional[float] = MAX_MS
              ) -> Histogram | None:
    """Counts of the finite values of ``x`` in ``bins`` equal bins; None for non-numeric or empty tensors.
    A tensor subclass's ``__torch_function__`` does not run."""
    import torch

    from .budget import single_threaded
    from .tensor import no_torch_function

    with no_torch_function(), torch.no_grad(), single_threaded():  # small ops: threads only add stalls
        return _histogram(x, bins, max(1, sample), max_ms)


def _histogram(x: Any, bins: int, sample: int, max_ms: Optional[float]) -> Histogram | None:
    import torch

    deadline = None if max_ms is None else time.perf_counter() + max_ms / 1000
    if not isinstance(x, torch.Tensor) or x.is_meta or x.numel() == 0:
        return None
    if not (x.layout == torch.strided or x.is_nested):
        return None
    source = _source(x.detach(), sample)
    if source is None:
        return None
    data, repeat, sampled = source
    integer = not (x.dtype.is_floating_point or x.dtype.is_complex or x.is_quantized)
    parts, read, complete = _values(data, deadline)
    finite_parts = [p for p, _, _ in parts if p.numel()]
    nonfinite = read - sum(p.numel() for p in finite_parts)
    if not finite_parts:
        return None
    lo, hi = min(p[1] for p in parts), max(p[2] for p in parts)
    if integer and hi - lo + 1 <= bins:
        bins = int(hi - lo + 1)
        lo, hi = lo - 0.5, hi + 0.5
    elif lo == hi:
        bins = 1
        lo, hi = lo - 0.5, hi + 0.5
    counts = sum(torch.histc(p, bins=bins, min=lo, max=hi) for p in finite_parts).tolist()
    step = (hi - lo) / bins
    edges = tuple(lo + i * step for i in range(bins)) + (hi,)
    finite = read - nonfinite
    return Histogram(edges=edges, counts=tuple(int(c) * repeat for c in counts), total=finite * repeat,
                     nonfinite=nonfinite * repeat, sampled=sampled or not complete, integer=integer and step == 1.0)


def _source(x: Any, sample: int) -> Optional[Tuple[Any, int, bool]]:
    """(a view of at most about ``sample`` elements to count, how many elements of ``x`` each stands for,
    whether that is a sample). Views only: nothing here reads or copies the values."""
    from ._views import reached, sample_view
    from .tensor import packed_nested

    if x.is_nested:
        import torch

        data = x.values() if x.layout == torch.jagged else packed_nested(x)
        if data is None:
            return None  # components scattered in memory: copying them one by one is not bounded
        return _thin(data, sample), 1, data.numel() > sample
    if x.is_quantized:  # cannot be re-strided: sliced along its own dims, dequantized chunk by chunk
        return sample_view(x, sample), 1, x.numel() > sample
    seen = reached(x)
    if not seen.overlapping:  # a broadcast view: its storage's histogram, each count times its repeats
        return _thin(seen.data, sample), seen.repeat, seen.data.numel() > sample
    if seen.data.numel() <= sample:
        return seen.data, seen.repeat, False  # small enough to count every read, overlaps included
    if seen.span is not None:  # the storage slice holding exactly the elements the view reads
        return _thin(seen.span, sample), 1, True
    return sample_view(seen.data, sample), seen.repeat, True


def _thin(data: Any, sample: int) -> Any:
    """``data`` itself, or a view of at most ``sample`` of its elements spread evenly over it: short
    contiguous runs when it is contiguous (single scattered elements cost a cache miss each)."""
    from ._views import memory_order, sample_view

    if data.numel() <= sample:
        return data
    data = memory_order(data)
    if not data.is_contiguous():
        return sample_view(data, sample)
    flat = data.view(-1)
    run = max(1, min(_RUN, sample // 64))
    blocks = sample // run
    return flat.as_strided((blocks, run), (flat.numel() // blocks, 1))


def _values(data: Any, deadline: Optional[float]) -> Tuple[List[Tuple[Any, float, float]], int, bool]:
    """((finite values of a chunk as floats, their min, their max) for each chunk read, elements read,
    whether every chunk was read)."""
    import torch

    from ._views import Chunks, spread

    chunks = Chunks(data, _CHUNK, reorder=not data.is_quantized)
    parts, read, n = [], 0, len(chunks)
    for i in spread(n):
        if deadline is not None and parts and time.perf_counter() > deadline:
            return parts, read, False
        c = chunks[i]
        if c.is_quantized:
            c = c.dequantize()
        if c.is_complex():
            c = c.abs()
        work = torch.float64 if c.dtype in (torch.float64, torch.int64) else torch.float32
        v = c.reshape(-1).to(work)  # one chunk's copy, never the whole tensor's
        read += v.numel()
        lo, hi = (float(t) for t in torch.aminmax(v))
        if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN/Inf present: keep the finite values only
            v = v[torch.isfinite(v)]
            lo, hi = (float(t) for t in torch.aminmax(v)) if v.numel() else (math.inf, -math.inf)
        parts.append((v, lo, hi))
    return parts, read, True
