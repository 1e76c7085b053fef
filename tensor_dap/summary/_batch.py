"""Stats of many small CPU tensors at once: a checkpoint listing is thousands of them.

Per-tensor overhead (a dozen tiny torch calls) dominates a 256-element tensor's summary, so small
plain tensors are packed into one float64 buffer and reduced per segment: a handful of torch
calls for a thousand tensors. The results match ``_stats.cpu_stats``: finite-value moments,
exact NaN/Inf counts, the finite range. A tensor whose values float64 cannot square safely (near
1e±150) is left to the single-tensor path, which rescales.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import torch

from ._stats import Stats

SMALL = 4096  # elements: at most this many per tensor, packed together
PACK = 2**20  # elements per packed buffer
_SAFE = (2.0**-400, 2.0**400)
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool)


def batchable(x: Any) -> bool:
    """A small, plain, dense CPU tensor of a real dtype: its stats can be packed with others'."""
    return (type(x) in (torch.Tensor, torch.nn.Parameter) and x.device.type == "cpu" and x.layout == torch.strided
            and not x.is_quantized and x.dtype in _DTYPES and 0 < x.numel() <= SMALL)


def batch_stats(tensors: List[Any]) -> List[Optional[Tuple[Stats, Any]]]:
    """(Stats, first values or None) for each tensor, packed ``PACK`` elements at a time; None where the
    single-tensor path must decide (magnitudes float64 cannot square)."""
    out: List[Optional[Tuple[Stats, Any]]] = []
    group: List[Any] = []
    size = 0
    for t in tensors:
        if group and size + t.numel() > PACK:
            out += _pack(group)
            group, size = [], 0
        group.append(t)
        size += t.numel()
    return out + (_pack(group) if group else [])


def _pack(group: List[Any]) -> List[Optional[Tuple[Stats, Any]]]:
    from .budget import VALUES_SHOWN

    with torch.no_grad():
        counts = torch.tensor([t.numel() for t in group])
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in group])
        k = len(group)
        seg = torch.repeat_interleave(torch.arange(k), counts)
        finite = torch.isfinite(flat)
        zeros = torch.zeros(k, dtype=torch.float64)
        n_finite = zeros.index_add(0, seg, finite.double())
        nan = zeros.index_add(0, seg, torch.isnan(flat).double())
        pinf = zeros.index_add(0, seg, (flat == math.inf).double())
        lo = torch.full((k,), math.inf, dtype=torch.float64).scatter_reduce(
            0, seg, torch.where(finite, flat, math.inf), "amin")
        hi = torch.full((k,), -math.inf, dtype=torch.float64).scatter_reduce(
            0, seg, torch.where(finite, flat, -math.inf), "amax")
        values = torch.where(finite, flat, 0.0)
        mean = zeros.index_add(0, seg, values) / n_finite.clamp(min=1)
        dev = torch.where(finite, flat - mean[seg], 0.0)
        m2 = zeros.index_add(0, seg, dev * dev)
        rows = torch.stack([counts.double(), n_finite, nan, pinf, lo, hi, mean, m2]).t().tolist()
    results: List[Optional[Tuple[Stats, Any]]] = []
    for t, (n, nf, n_nan, n_pinf, low, high, mu, sq) in zip(group, rows):
        top = max(abs(low), abs(high)) if nf else 0.0
        if nf and (top > _SAFE[1] or 0 < top < _SAFE[0] or not math.isfinite(sq)):
            results.append(None)
            continue
        n, nf = int(n), int(nf)
        ninf = n - nf - int(n_nan) - int(n_pinf)
        std = (0.0 if nf == 1 else math.sqrt(sq / (nf - 1))) if nf else None
        stats = Stats(nf, low if nf else None, high if nf else None, mu if nf else None, std,
                      int(n_nan), int(n_pinf), ninf, n_nan > 0, n_pinf > 0, ninf > 0, False, True, True)
        results.append((stats, tuple(t.detach().reshape(-1).tolist()) if n <= VALUES_SHOWN else None))
    return results
