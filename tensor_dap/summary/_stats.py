"""The numeric engine behind summaries: range, mean, std and NaN/Inf counts in one bounded pass.

On CPU a tensor is walked in cache-sized chunks, made on demand (``_views.Chunks``), so nothing
is built in proportion to its size before the time cap is checked, and the cap is checked
before every chunk. Each chunk gets its extremes, then (while it is still in cache) its mean
and the sum of squared deviations; chunks are merged with Chan's parallel formula. A chunk
holding NaN/Inf is counted on the spot and its moments taken over its finite values, so a
single NaN costs neither the mean nor the exact range. Moments are computed on the values
rescaled by a power of two (exact) whenever their magnitude would underflow or overflow the
squares, and merged in float64 with a common exponent, so 1e-30 and 1e308 keep their σ.

Broadcast views are summarized from the storage they repeat (``_views.reached``), counted
right; views that overlap in memory from a sample, saying so. The device path is
``_device.packed_stats``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Tuple

import torch

from ._views import Chunks, Reached, memory_order, reached, sample_view, spread
from .budget import Budget

_INF = float("inf")
# |x| inside this window needs no rescaling: squared deviations neither underflow nor overflow
_SAFE = {torch.float32: (2.0**-20, 2.0**20), torch.float64: (2.0**-400, 2.0**400)}
OVERLAP_FACTOR = 16  # an overlapping view is walked whole only up to this many times its storage
RARE = 10  # fewer NaN/Inf than this in a sample are reported as seen, not scaled to the whole tensor
_SCATTERED_CHUNK = 2**16  # chunk of a strided sample or a dequantized tensor: its copies stay small


@dataclass(frozen=True)
class Stats:
    count: int  # finite elements the moments stand for (a broadcast view counts its repeats)
    min: Optional[float]  # of the finite values
    max: Optional[float]
    mean: Optional[float]  # of the finite values
    std: Optional[float]
    nan: Optional[int]  # exact when counts_exact, else an estimate from the elements read
    pos_inf: Optional[int]
    neg_inf: Optional[int]
    has_nan: bool
    has_pos_inf: bool
    has_neg_inf: bool
    sampled: bool  # moments come from a sample
    range_exact: bool  # min/max and NaN/Inf presence cover every element
    counts_exact: bool = True


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype stats are computed in: wide enough to be exact for display, cheap enough to be fast."""
    if dtype in (torch.float64, torch.complex128, torch.int64, torch.int32):
        return torch.float64
    if hasattr(torch, "uint32") and dtype in (torch.uint32, torch.uint64):
        return torch.float64
    return torch.float32


# dtypes torch.aminmax handles directly, so a range-only scan needs no upcast copy
_NATIVE_AMINMAX = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                   torch.int16, torch.int32, torch.int64, torch.bool)


class _Workspace:
    """Two reusable flat buffers so per-chunk temporaries never hit the allocator."""

    def __init__(self, dtype: torch.dtype, size: int) -> None:
        self.dtype = dtype
        self.size = size
        self._a: Optional[torch.Tensor] = None
        self._b: Optional[torch.Tensor] = None

    def _get(self, which: str, n: int) -> torch.Tensor:
        buf = getattr(self, which)
        if buf is None or buf.numel() < n:
            buf = torch.empty(n, dtype=self.dtype)  # a tensor smaller than a chunk gets no chunk-sized buffer
            setattr(self, which, buf)
        return buf[:n]

    def values(self, chunk: torch.Tensor, range_only: bool = False) -> torch.Tensor:
        """The chunk as real numbers (magnitude for complex): in the work dtype, or as it is for a range."""
        if chunk.is_quantized:
            chunk = chunk.dequantize()  # one chunk at a time: never the whole tensor
        if range_only and chunk.dtype in _NATIVE_AMINMAX:
            return chunk
        if chunk.is_complex():
            return torch.abs(chunk, out=self._get("_a", chunk.numel()).view(chunk.shape))
        if chunk.dtype == self.dtype:
            return chunk
        return self._get("_a", chunk.numel()).view(chunk.shape).copy_(chunk)

    def buffer(self, v: torch.Tensor) -> torch.Tensor:
        """The first buffer, shaped like ``v``: where a chunk's values are rewritten (never the user's tensor)."""
        return self._get("_a", v.numel()).view(v.shape)

    def scaled(self, v: torch.Tensor, exponent: int) -> torch.Tensor:
        """``v * 2**exponent`` into a buffer (exact: a power of two), in steps the work dtype can hold."""
        out = self._get("_a", v.numel()).view(v.shape)
        first = True
        while exponent:
            step = max(-100, min(100, exponent))
            if first:
                torch.mul(v, 2.0**step, out=out)
                first = False
            else:
                out.mul_(2.0**step)
            exponent -= step
        return out

    def moments(self, v: torch.Tensor, lo: float, hi: float, fill: Tuple[int, float] = (0, 0.0)
                ) -> Tuple[int, float, float, float, int]:
        """(n, mean, sum(d), sum(d^2), e) of the finite values of ``v`` in units of 2**e, while ``v`` is in cache.

        The mean is rounded to the work dtype; the deviation sum corrects it (the corrected
        two-pass formula), so a large offset does not leak into the variance. ``fill = (k, m0)``:
        ``k`` elements of ``v`` are stand-ins of value ``m0`` for NaN/Inf, taken back out of the sums.
        """
        low, high = _SAFE.get(self.dtype, _SAFE[torch.float32])
        absmax = max(abs(lo), abs(hi))
        e = 0 if absmax == 0 or low <= absmax <= high else math.frexp(absmax)[1]
        if e:
            v = self.scaled(v, -e)
        mean = v.mean()
        d = torch.sub(v, mean, out=self._get("_b", v.numel()).view(v.shape)).view(-1)
        m, s, q = torch.stack([mean, d.sum(), torch.dot(d, d)]).tolist()
        k, stand_in = fill
        off = _ldexp(stand_in, -e) - m
        return v.numel() - k, m, s - k * off, max(0.0, q - k * off * off), e


def _nonfinite(v: torch.Tensor) -> Tuple[Tuple[int, int, int], float, float]:
    """(NaN, +Inf, -Inf counts), finite min, finite max of a chunk holding NaN or Inf.

    Float passes only (``nan_to_num``, reductions): boolean masks cost several times more, and this
    runs under the same time cap as everything else.
    """
    top = float(torch.amax(torch.nan_to_num(v, nan=-_INF, posinf=_INF, neginf=-_INF)))  # +inf if any
    bottom = float(torch.amin(torch.nan_to_num(v, nan=_INF, posinf=_INF, neginf=-_INF)))  # -inf if any
    hi = top if top != _INF else float(torch.amax(torch.nan_to_num(v, nan=-_INF, posinf=-_INF, neginf=-_INF)))
    lo = bottom if bottom != -_INF else float(torch.amin(torch.nan_to_num(v, nan=_INF, posinf=_INF, neginf=_INF)))
    bad = int(torch.sum(torch.nan_to_num(v * 0, nan=1.0), dtype=torch.float64))  # x*0 is NaN for NaN and ±inf
    pinf = int(torch.count_nonzero(v == _INF)) if top == _INF else 0
    ninf = int(torch.count_nonzero(v == -_INF)) if bottom == -_INF else 0
    return (bad - pinf - ninf, pinf, ninf), lo, hi


def _ldexp(x: float, e: int) -> float:
    try:
        return math.ldexp(x, e)
    except OverflowError:
        return math.copysign(_INF, x)


def merge(rows: List[Tuple[int, float, float, float, int]]) -> Tuple[int, Optional[float], Optional[float]]:
    """(count, mean, unbiased std) from per-chunk moment rows (Chan et al.), in float64 with a common exponent."""
    total = sum(r[0] for r in rows)
    if not total:
        return 0, None, None
    top = max(r[4] for r in rows)
    means, m2s = [], []
    for n, m, s, q, e in rows:
        s = _ldexp(s, e - top)
        means.append(_ldexp(m, e - top) + s / n)
        m2s.append(max(0.0, _ldexp(q, 2 * (e - top)) - s * s / n))  # rounding can leave it a hair below 0
    grand = math.fsum(n * m for (n, *_), m in zip(rows, means)) / total
    m2 = max(0.0, math.fsum(m2s) + math.fsum(r[0] * (m - grand) ** 2 for r, m in zip(rows, means)))
    std = 0.0 if total == 1 else _ldexp(math.sqrt(m2 / (total - 1)), top)
    return total, _ldexp(grand, top), std


@dataclass
class _Scan:
    """What one pass has read so far."""

    ws: _Workspace
    rows: List[Tuple[int, float, float, float, int]] = field(default_factory=list)
    lo: float = _INF
    hi: float = -_INF
    read: int = 0  # elements read
    counts: List[int] = field(default_factory=lambda: [0, 0, 0])  # NaN, +Inf, -Inf in everything read
    moment_read: int = 0  # elements read by moment chunks (an even spread)
    moment_counts: List[int] = field(default_factory=lambda: [0, 0, 0])

    def chunk(self, c: torch.Tensor, moment: bool, ranged: bool = True) -> None:
        """Read one chunk: its range and NaN/Inf counts, and its moments when ``moment``; ``ranged=False``
        for a chunk whose range the pass has already read (moments only, nothing counted twice)."""
        v = self.ws.values(c, range_only=not moment)
        lo, hi = (float(t) for t in torch.aminmax(v))
        counts = (0, 0, 0)
        fill = (0, 0.0)
        if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN hides the extremes: look closer, in cache
            counts, lo, hi = _nonfinite(v)
            if moment and math.isfinite(lo):  # NaN/Inf become the mid-range, then are taken back out
                fill = (sum(counts), (lo + hi) / 2)
                v = torch.nan_to_num(v, nan=fill[1], posinf=fill[1], neginf=fill[1], out=self.ws.buffer(v))
        if ranged:
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
            self.read += c.numel()
            self.counts = [a + b for a, b in zip(self.counts, counts)]
        if moment:
            self.moment_read += c.numel()
            self.moment_counts = [a + b for a, b in zip(self.moment_counts, counts)]
            if math.isfinite(lo):  # else there is no finite value to take moments of
                self.rows.append(self.ws.moments(v, lo, hi, fill))


FIRST_SAMPLE = 4  # moment chunks read before the range pass: μ≈ σ≈ from a few spread places, then every element


def _schedule(n: int, taken: List[int], sampled: bool, scan_all: bool
              ) -> Iterator[Tuple[int, bool, bool]]:
    """(chunk, moment, ranged) in reading order.

    Exact: every chunk once, with moments. Sampled: a few spread moment chunks first, then the range of
    every other chunk, then the rest of the moment sample (moments only, its range already read), so a
    pass cut short by the time cap has spent its time on the range and NaN/Inf presence of as much of
    the tensor as it could, not on a finer mean.
    """
    order = [taken[j] for j in spread(len(taken))]
    if not sampled:
        yield from ((i, True, True) for i in order)
        return
    first, later = order[:FIRST_SAMPLE], order[FIRST_SAMPLE:]
    yield from ((i, True, True) for i in first)
    if not scan_all:  # no range pass: the sample is all the range there is
        yield from ((i, True, True) for i in later)
        return
    done = set(first)
    yield from ((i, False, True) for i in range(n) if i not in done)
    yield from ((i, True, False) for i in later)


def _passes(x: torch.Tensor, budget: Budget, deadline: Optional[float], moments: bool = True,
            reorder: bool = True) -> Tuple[_Scan, bool]:
    """Moment chunks spread over ``x`` (all of them within the exact budget) and a range-only scan of
    the rest within the scan budget (see ``_schedule``). Returns the scan and whether the moments are a sample."""
    numel = x.numel()
    exact, scan_cap = budget.exact_elements, budget.scan_elements
    sampled = not moments or (exact is not None and numel > exact)
    size = budget.chunk_elements
    if sampled and moments:  # small enough chunks that the sample spreads over at least 16 places
        size = max(256, min(size, exact // 16))
    chunks = Chunks(x, size, reorder)
    n = len(chunks)
    every = max(1, math.ceil(numel / exact)) if sampled and moments else 1
    taken = list(range(0, n, every)) if moments else []
    scan_all = not sampled or scan_cap is None or numel <= scan_cap
    scan = _Scan(_Workspace(work_dtype(x.dtype), budget.chunk_elements))
    if n == 1:  # most tensors: one chunk, no schedule to make
        scan.chunk(chunks[0], moments)
        return scan, not moments
    for i, moment, ranged in _schedule(n, taken, sampled, scan_all):
        if deadline is not None and scan.read and time.perf_counter() > deadline:
            return scan, True
        scan.chunk(chunks[i], moment, ranged)
    return scan, sampled


def cpu_stats(x: torch.Tensor, budget: Budget) -> Stats:
    """Stats of a dense (or quantized) CPU tensor within ``budget``."""
    deadline = None if budget.max_ms is None else time.perf_counter() + budget.max_ms / 1000
    numel = x.numel()
    small = Budget(budget.exact_elements, budget.scan_elements, min(budget.chunk_elements, 4 * _SCATTERED_CHUNK),
                   budget.max_ms)
    if x.is_quantized:  # dequantized chunk by chunk, along its own dims
        scan, sampled = _passes(x, small, deadline, reorder=False)
        return _stats(scan, sampled, numel, numel, 1)
    r = reached(x)
    if r.overlapping and r.data.numel() > _overlap_limit(r, budget):
        return _overlapping(r, budget, deadline, numel)
    # a gathered (strided) or complex chunk costs several times a dense one: smaller chunks keep the
    # deadline's overshoot (one chunk) small
    costly = r.data.is_complex() or not memory_order(r.data).is_contiguous()
    scan, sampled = _passes(r.data, small if costly else budget, deadline)
    return _stats(scan, sampled, numel, r.data.numel(), r.repeat)


def _overlap_limit(r: Reached, budget: Budget) -> int:
    """How large an overlapping view may be and still be walked element by element."""
    if budget.exact_elements is not None:
        return budget.exact_elements
    return max(OVERLAP_FACTOR * r.data.untyped_storage().nbytes() // max(1, r.data.element_size()), 2**20)


def _overlapping(r: Reached, budget: Budget, deadline: Optional[float], numel: int) -> Stats:
    """An unfold/as_strided view far larger than its storage: the range and NaN/Inf presence from the storage
    span it covers, when it covers one (read first: contiguous and exact), then moments and count
    estimates from an even sample of the view, in small chunks (scattered reads are slow)."""
    lo, hi, present, complete = _INF, -_INF, [False] * 3, False
    if r.span is not None:
        span, _ = _passes(r.span, budget, deadline, moments=False)
        complete = span.read == r.span.numel()
        lo, hi, present = span.lo, span.hi, [c > 0 for c in span.counts]
    sample = sample_view(r.data, budget.exact_elements or 2**24)
    stored = r.data.untyped_storage().nbytes() // max(1, r.data.element_size())
    chunk = min(budget.chunk_elements, _SCATTERED_CHUNK, max(4096, stored // 4))  # buffers small beside the storage
    small = Budget(None, None, chunk, budget.max_ms)
    scan, _ = _passes(sample, small, deadline)
    count, mean, std = merge(scan.rows)
    counts = [round(c * numel / scan.read) for c in scan.counts]
    if not complete:
        lo, hi = min(lo, scan.lo), max(hi, scan.hi)
        present = [p or c > 0 for p, c in zip(present, scan.counts)]
    return Stats(count * r.repeat, lo if lo != _INF else None, hi if hi != -_INF else None, mean, std, *counts,
                 *present, sampled=True, range_exact=complete, counts_exact=False)


def scaled(seen: int, total: int, read: int) -> int:
    """A count over ``total`` elements estimated from ``seen`` in ``read`` of them; a rare event (a handful
    seen) is not multiplied up: one NaN in a sample says little about how many the rest holds."""
    return round(seen * total / read) if seen >= RARE else seen


def _stats(scan: _Scan, sampled: bool, numel: int, data_numel: int, repeat: int) -> Stats:
    """The summary of one pass over ``data_numel`` elements, each standing for ``repeat`` of the ``numel``."""
    count, mean, std = merge(scan.rows)
    if repeat > 1 and count > 1:  # each element repeated: n and m2 scale by repeat, the variance estimate barely
        std = std * math.sqrt((count - 1) * repeat / (count * repeat - 1))
    complete = scan.read == data_numel
    if complete:
        counts = [c * repeat for c in scan.counts]
    elif scan.moment_read:  # an estimate from the evenly spread moment chunks, never below what was seen
        counts = [max(scaled(m, numel, scan.moment_read), c * repeat) for m, c in zip(scan.moment_counts, scan.counts)]
    else:
        counts = [None, None, None]
    return Stats(
        count * repeat,
        scan.lo if scan.lo != _INF else None,
        scan.hi if scan.hi != -_INF else None,
        mean, std, *counts,
        scan.counts[0] > 0, scan.counts[1] > 0, scan.counts[2] > 0,
        sampled or not complete, complete, complete,
    )
