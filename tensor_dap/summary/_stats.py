"""The numeric engine behind summaries: min/max/mean/std/NaN/Inf in as few memory passes as possible.

On CPU a tensor is walked in cache-sized chunks; each chunk gets min/max, mean and the
sum of squared deviations while it is still in cache, and the chunks are merged with
Chan's parallel formula. That is one trip through memory for stable, exact moments.
On accelerators the reductions stay on the device and every scalar comes back in one
packed transfer (one synchronization). There the NaN/Inf counts are computed every time:
deciding whether to count would itself need a second synchronization, and the extra
device passes cost less than that round trip.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional

import torch

from .budget import Budget

_INF = float("inf")


@dataclass(frozen=True)
class Stats:
    count: int  # elements the moments were computed on
    min: Optional[float]
    max: Optional[float]
    mean: Optional[float]
    std: Optional[float]
    nan: Optional[int]
    pos_inf: Optional[int]
    neg_inf: Optional[int]
    has_nan: bool
    has_pos_inf: bool
    has_neg_inf: bool
    sampled: bool  # moments (and counts) come from a sample
    range_exact: bool  # min/max and NaN/Inf presence cover every element


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype stats are computed in: wide enough to be exact for display, cheap enough to be fast."""
    if dtype in (torch.float64, torch.complex128, torch.int64, torch.int32):
        return torch.float64
    if hasattr(torch, "uint32") and dtype in (torch.uint32, torch.uint64):
        return torch.float64
    return torch.float32


def _memory_order(x: torch.Tensor) -> torch.Tensor:
    """The same elements with dims permuted into memory order (stats do not care about order).

    A transposed or channels-last tensor becomes contiguous again, so it can be walked
    linearly instead of jumping across cache lines.
    """
    if x.dim() < 2 or x.is_contiguous():
        return x
    order = sorted(range(x.dim()), key=lambda d: (x.stride(d), x.shape[d]), reverse=True)
    return x.permute(order)


def _iter_chunks(x: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    """Yield views of ``x`` of about ``size`` elements each, never copying."""
    if x.numel() == 0:
        return
    x = _memory_order(x)
    if x.is_contiguous():
        flat = x.view(-1)
        for start in range(0, flat.numel(), size):
            yield flat[start:start + size]
        return
    if x.numel() <= size or x.dim() == 0:
        yield x
        return
    row = x[0].numel()
    if row >= size:
        for i in range(x.shape[0]):
            yield from _iter_chunks(x[i], size)
        return
    step = max(1, size // max(row, 1))
    for start in range(0, x.shape[0], step):
        yield x[start:start + step]


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
            buf = torch.empty(max(n, self.size), dtype=self.dtype)
            setattr(self, which, buf)
        return buf[:n]

    def scan_values(self, chunk: torch.Tensor) -> torch.Tensor:
        """What a min/max-only pass reads: the chunk itself where aminmax supports its dtype."""
        if chunk.dtype in _NATIVE_AMINMAX:
            return chunk
        return self.values(chunk)

    def values(self, chunk: torch.Tensor) -> torch.Tensor:
        """The chunk as real numbers in the work dtype (magnitude for complex)."""
        if chunk.is_complex():
            return torch.abs(chunk, out=self._get("_a", chunk.numel()).view(chunk.shape))
        if chunk.dtype == self.dtype:
            return chunk
        return self._get("_a", chunk.numel()).view(chunk.shape).copy_(chunk)

    def deviations(self, v: torch.Tensor, mean: torch.Tensor) -> tuple:
        """Sum and sum of squares of ``v - mean``, computed while ``v`` is still in cache."""
        d = torch.sub(v, mean, out=self._get("_b", v.numel()).view(v.shape)).view(-1)
        return d.sum(), torch.dot(d, d)

    def finite_range(self, v: torch.Tensor) -> tuple:
        """(min, max) over the finite values of ``v``; (inf, -inf) when there are none."""
        buf = self._get("_b", v.numel()).view(v.shape)
        low = torch.nan_to_num(v, nan=_INF, posinf=_INF, neginf=_INF, out=buf).min().item()
        high = torch.nan_to_num(v, nan=-_INF, posinf=-_INF, neginf=-_INF, out=buf).max().item()
        return low, high


def _merge(parts: List[torch.Tensor]) -> tuple:
    """Merge per-chunk [n, min, max, mean, sum(d), sum(d^2)] rows into (count, mean, m2), in float64.

    Chan et al.'s parallel formula.

    The chunk mean is rounded to the chunk's dtype; the deviation sum corrects it
    (the corrected two-pass formula), so a large offset does not leak into the variance.
    """
    rows = torch.stack([p.to(torch.float64) for p in parts])
    n, _, _, rough, dsum, dsq = rows.unbind(1)
    # an infinite chunk mean is already the answer; correcting it would turn inf into NaN
    mean = torch.where(torch.isfinite(rough), rough + dsum / n, rough)
    m2 = dsq - dsum * dsum / n
    total = n.sum()
    grand = (n * mean).sum() / total
    m2_total = m2.sum() + (n * (mean - grand) ** 2).sum()
    return total.item(), grand.item(), m2_total.item()


def _std(count: float, m2: float) -> float:
    """Unbiased std from the sum of squared deviations (0 for one element, NaN when undefined)."""
    if count == 1:
        return 0.0
    return math.sqrt(m2 / (count - 1)) if count > 1 and math.isfinite(m2) else float("nan")


def _moment_row(v: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, ws: "_Workspace") -> torch.Tensor:
    """[n, min, max, mean, sum(d), sum(d^2)] of one chunk, while it is in cache."""
    mean = v.mean()
    dsum, dsq = ws.deviations(v, mean)
    return torch.stack([torch.tensor(float(v.numel()), dtype=ws.dtype), lo.to(ws.dtype), hi.to(ws.dtype),
                        mean, dsum, dsq])


def _widen_overflowed(moments: List[torch.Tensor], chunks: List[torch.Tensor], ws: "_Workspace") -> None:
    """Redo in float64 the chunks whose values are finite but whose sums overflowed float32.

    Values near float32's limit (|x| > ~1e19) square past it; this is rare, so the fast
    path stays float32 and only those chunks pay for the wider type.
    """
    if not moments or ws.dtype == torch.float64:
        return
    rows = torch.stack(moments)
    overflowed = torch.isfinite(rows[:, 1:3]).all(1) & ~torch.isfinite(rows[:, 3:]).all(1)
    if not bool(overflowed.any()):
        return
    wide = _Workspace(torch.float64, ws.size)
    for i in overflowed.nonzero().flatten().tolist():
        v = wide.values(chunks[i])
        lo, hi = torch.aminmax(v)
        moments[i] = _moment_row(v, lo, hi, wide)


def cpu_stats(x: torch.Tensor, budget: Budget) -> Stats:
    """Stats of a dense CPU tensor within ``budget``."""
    numel = x.numel()
    exact_cap = budget.exact_elements
    scan_cap = budget.scan_elements
    sampled = exact_cap is not None and numel > exact_cap
    scan_all = not sampled or scan_cap is None or numel <= scan_cap
    every = max(1, math.ceil(numel / exact_cap)) if sampled else 1
    chunk_size = budget.chunk_elements
    if sampled:  # small enough chunks that the sample spreads over at least 16 places
        chunk_size = max(256, min(chunk_size, exact_cap // 16))
    ws = _Workspace(work_dtype(x.dtype), budget.chunk_elements)

    chunks = list(_iter_chunks(x, chunk_size))
    taken = chunks[::every]
    # Moments first (spread over the whole tensor), then the range-only scan of the rest,
    # so running out of time costs exactness of the range, never the spread of the sample.
    rest = [c for i, c in enumerate(chunks) if i % every] if scan_all else []
    deadline = None if budget.max_ms is None else time.perf_counter() + budget.max_ms / 1000

    moments: List[torch.Tensor] = []
    seen: List[torch.Tensor] = []  # every chunk that was read, for the rare second pass
    lows: List[torch.Tensor] = []
    highs: List[torch.Tensor] = []
    for chunk in taken + rest:
        if deadline is not None and seen and time.perf_counter() > deadline:
            sampled, scan_all = True, False
            break
        moment = len(moments) < len(taken)
        v = ws.values(chunk) if moment else ws.scan_values(chunk)
        lo, hi = torch.aminmax(v)
        seen.append(chunk)
        lows.append(lo.to(ws.dtype))
        highs.append(hi.to(ws.dtype))
        if moment:
            moments.append(_moment_row(v, lo, hi, ws))

    _widen_overflowed(moments, seen, ws)
    count, mean, m2 = _merge(moments)
    std = _std(count, m2)
    chunk_lo = torch.stack(lows).tolist()
    chunk_hi = torch.stack(highs).tolist()
    bad = [i for i, (a, b) in enumerate(zip(chunk_lo, chunk_hi)) if not (math.isfinite(a) and math.isfinite(b))]
    lo = min((a for a, b in zip(chunk_lo, chunk_hi) if math.isfinite(a) and math.isfinite(b)), default=_INF)
    hi = max((b for a, b in zip(chunk_lo, chunk_hi) if math.isfinite(a) and math.isfinite(b)), default=-_INF)
    # Presence is known from the chunk extremes; counts and the finite range of those chunks
    # need a second look, which the time cap can cut short.
    has_nan = any(math.isnan(chunk_lo[i]) or math.isnan(chunk_hi[i]) for i in bad)
    has_pinf = any(chunk_hi[i] == _INF for i in bad)
    has_ninf = any(chunk_lo[i] == -_INF for i in bad)
    counts: Optional[List[int]] = [0, 0, 0]
    for i in bad:
        if deadline is not None and time.perf_counter() > deadline:
            counts, scan_all = None, False
            break
        v = ws.values(seen[i])
        counts[0] += int(torch.isnan(v).sum())
        counts[1] += int((v == _INF).sum())
        counts[2] += int((v == -_INF).sum())
        a, b = ws.finite_range(v)
        lo, hi = min(lo, a), max(hi, b)
    nan, pinf, ninf = counts if counts is not None else (None, None, None)
    return Stats(
        int(count),
        lo if lo != _INF else None,
        hi if hi != -_INF else None,
        mean, std, nan, pinf, ninf,
        has_nan or bool(nan), has_pinf or bool(pinf), has_ninf or bool(ninf),
        sampled, scan_all,
    )


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


def packed_stats(x: torch.Tensor, budget: Budget, values_limit: int = 0) -> tuple:
    """Stats computed on the tensor's own device, read back in one transfer.

    Returns ``(Stats, values)`` where ``values`` holds the first ``values_limit`` elements
    (as Python numbers) when the tensor is that small, so a tiny tensor costs no extra sync.
    """
    numel = x.numel()
    sampled = budget.exact_elements is not None and numel > budget.exact_elements
    view = sample_view(x, budget.exact_elements) if sampled else x
    wd = work_dtype(x.dtype)
    v = view.abs() if view.is_complex() else view
    v = v.to(wd)
    n = v.numel()
    finite_mask = torch.isfinite(v)
    fmin = torch.where(finite_mask, v, _INF).min() if n else v.new_tensor(_INF)
    fmax = torch.where(finite_mask, v, -_INF).max() if n else v.new_tensor(-_INF)
    # Scale by the largest finite magnitude (on the device, no sync) so squares cannot overflow.
    absmax = torch.maximum(fmin.abs(), fmax.abs())
    scale = torch.where(torch.isfinite(absmax) & (absmax > 0), absmax, torch.ones_like(absmax))
    var, mean = torch.var_mean(v / scale, unbiased=False) if n else (v.new_zeros(()), v.new_zeros(()))
    parts = [
        v.new_tensor(float(n)),
        fmin,
        fmax,
        mean * scale,
        var * n,
        scale,
        torch.isnan(v).sum().to(wd),
        (v == _INF).sum().to(wd),
        (v == -_INF).sum().to(wd),
    ]
    small = None
    if values_limit and numel <= values_limit:
        flat = x.reshape(-1)
        small = torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat
        parts.append(small.to(torch.float64 if wd == torch.float64 or small.dtype.is_floating_point else wd))
    packed = torch.cat([p.reshape(-1).to(torch.float64) for p in parts]).cpu().tolist()
    count, fmin, fmax, mean_v, m2_scaled, scale, nan, pinf, ninf = packed[:9]
    m2 = m2_scaled * scale * scale
    values = packed[9:] if small is not None else None
    std = _std(count, m2)  # a NaN mean comes with a NaN m2, so _std already says NaN
    stats = Stats(
        int(count),
        fmin if fmin != _INF else None,
        fmax if fmax != -_INF else None,
        mean_v, std if count else None,
        int(nan), int(pinf), int(ninf), nan > 0, pinf > 0, ninf > 0,
        sampled, not sampled,
    )
    return stats, values
