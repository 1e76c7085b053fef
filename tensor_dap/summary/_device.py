"""Stats on an accelerator: every reduction stays on the device, every scalar comes back in one transfer.

There the NaN/Inf counts are computed every time: deciding whether to count would itself need
a second synchronization, and the extra device passes cost less than that round trip. Moments
are of the finite values, computed on the values divided by the largest finite magnitude, so
squares neither overflow nor underflow. A broadcast view is reduced to the storage it repeats
first (``_views.reached``), and anything past the exact budget is an even strided sample, so the
copies made here are bounded by the budget, never by the tensor's logical size.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import torch

from ._stats import Stats, scaled, work_dtype
from ._views import reached, sample_view
from .budget import Budget

_INF = float("inf")
_SAMPLE_CAP = 2**24  # the most elements an exact budget reduces on a device view that overlaps itself


def packed_stats(x: torch.Tensor, budget: Budget, values_limit: int = 0) -> Tuple[Stats, Optional[List[Any]]]:
    """Stats computed on the tensor's own device, read back in one transfer.

    Returns ``(Stats, values)`` where ``values`` holds the first ``values_limit`` elements
    (as Python numbers) when the tensor is that small, so a tiny tensor costs no extra sync.
    """
    numel = x.numel()
    r = reached(x)
    data = r.data
    cap = budget.exact_elements if budget.exact_elements is not None else (_SAMPLE_CAP if r.overlapping else None)
    sampled = cap is not None and data.numel() > cap
    view = sample_view(data, cap) if sampled and cap is not None else data
    wd = work_dtype(x.dtype)
    v = view.abs() if view.is_complex() else view
    v = v.to(wd)
    n = v.numel()
    finite = torch.isfinite(v)
    fmin = torch.where(finite, v, _INF).min() if n else v.new_tensor(_INF)
    fmax = torch.where(finite, v, -_INF).max() if n else v.new_tensor(-_INF)
    absmax = torch.maximum(fmin.abs(), fmax.abs())
    scale = torch.where(torch.isfinite(absmax) & (absmax > 0), absmax, torch.ones_like(absmax))
    nf = finite.sum().to(wd)
    u = torch.where(finite, v / scale, torch.zeros_like(v)) if n else v
    mean_s = u.sum() / torch.clamp(nf, min=1)
    dev = torch.where(finite, u - mean_s, torch.zeros_like(u)) if n else u
    parts = [v.new_tensor(float(n)), nf, fmin, fmax, mean_s, (dev * dev).sum(), scale,
             torch.isnan(v).sum().to(wd), (v == _INF).sum().to(wd), (v == -_INF).sum().to(wd)]
    small = None
    if values_limit and numel <= values_limit:
        flat = x.reshape(-1)
        small = torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat
        parts.append(small.to(torch.float64 if wd == torch.float64 or small.dtype.is_floating_point else wd))
    packed = torch.cat([p.reshape(-1).to(torch.float64) for p in parts]).cpu().tolist()
    read, count, fmin_v, fmax_v, mean_s_v, m2_s, scale_v, *counts = packed[:10]
    values = packed[10:] if small is not None else None
    counts = [int(c) * r.repeat if not sampled else scaled(int(c), numel, int(read)) for c in counts]
    count = int(count)
    std = None
    if count:
        std = 0.0 if count == 1 else math.sqrt(max(0.0, m2_s) / (count - 1)) * scale_v
        if r.repeat > 1 and count > 1:
            std *= math.sqrt((count - 1) * r.repeat / (count * r.repeat - 1))
    stats = Stats(
        count * r.repeat,
        fmin_v if fmin_v != _INF else None,
        fmax_v if fmax_v != -_INF else None,
        mean_s_v * scale_v if count else None, std,
        *counts, counts[0] > 0, counts[1] > 0, counts[2] > 0,
        sampled, not sampled, not sampled,
    )
    return stats, values
