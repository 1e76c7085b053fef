"""The numbers the monitor logs, computed on the tensors' device and read back in one transfer.

Nothing here calls ``.item()`` per parameter: norms are fused (``torch._foreach_norm``),
histograms are counted on the device (``torch.histc``) and results come back as small
tensors (a histogram in two). Histogram buckets are counted on an evenly strided sample
(see raw_histogram).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

BINS = 30
SAMPLE = 2**15  # values whose bucket counts stand for a tensor's (30 buckets: ~3 % noise a bucket)


def _norms(tensors: list[Any]) -> Any:
    """One 0-dim float32 norm per tensor, stacked (on the first tensor's device)."""
    import torch

    first = tensors[0]
    if all(t.device == first.device and t.dtype == first.dtype for t in tensors):  # the usual case: one fused call
        return torch.stack(torch._foreach_norm(tensors)).float()
    groups: dict[tuple[Any, Any], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    out: list[Any] = [None] * len(tensors)
    device = tensors[0].device
    for idx in groups.values():
        for i, n in zip(idx, torch._foreach_norm([tensors[i] for i in idx])):
            out[i] = n.to(device=device, dtype=torch.float32)
    return torch.stack(out)


def layer_norms(tensors: list[Any]) -> list[Any]:
    """Each tensor's 2-norm, 0-dim tensors left on the device, nothing stacked (the total norm over
    them is made when they are read back, a few stacks and a norm fewer a step).

    On devices, one fused ``_foreach_norm``. On the CPU, where foreach ops loop tensor by tensor, a
    contiguous float32 gradient takes BLAS ``sqrt(dot(g, g))``: about half the time of its norm
    kernel on a step's gradients, and the same float32 sum of squares (it overflows where
    ``clip_grad_norm_`` does).
    """
    import torch

    with torch.no_grad():  # foreach ops take mixed devices and dtypes, a slower path for those
        if not all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
            return list(torch._foreach_norm(tensors))
        flat = [t.view(-1) for t in tensors]
        return [torch.dot(v, v).sqrt_() for v in flat]


def norms(tensors: list[Any]) -> list[float]:
    """Each tensor's 2-norm, read back together."""
    import torch

    with torch.no_grad():
        return _norms(tensors).tolist()


def update_ratios(params: list[Any], before: list[Any]) -> list[float]:
    """||new - old|| / ||old|| per parameter (the update-to-weight ratio; ~1e-3 is the usual healthy range)."""
    import torch

    with torch.no_grad():
        delta = _norms(torch._foreach_sub(params, before))
        base = _norms(before)
        return (delta / base.clamp_min(1e-30)).tolist()


@dataclass(frozen=True)
class RawHistogram:
    """What TensorBoard's ``add_histogram_raw`` takes."""

    min: float
    max: float
    num: int
    sum: float
    sum_squares: float
    bucket_limits: list[float]
    bucket_counts: list[float]


def raw_histogram(x: Any, bins: int = BINS, sample: int = SAMPLE) -> Optional[RawHistogram]:
    """``x``'s finite values for TensorBoard; None if there are none.

    Range, count, sum and sum of squares are over the whole tensor (float32 sums at least); the
    bucket counts come from an evenly strided sample of at most ``sample`` values, scaled to
    the count: counting every value is ~9 ns an element on a CPU (4 ms for a 784×256 weight).
    Two small transfers: the range, then the sums with the counts.
    """
    import torch

    with torch.no_grad():
        flat = x.detach().reshape(-1)
        if flat.numel() == 0:
            return None
        if not flat.is_floating_point():
            flat = flat.float()
        lo_v, hi_v = torch.stack(torch.aminmax(flat)).tolist()  # few ops: each costs microseconds in a step
        if math.isfinite(lo_v) and math.isfinite(hi_v):  # NaN and Inf show up in the range: all finite
            finite, n = flat, flat.numel()
        else:  # rare: leave NaN/Inf out of every number (a pass over the tensor, only then)
            finite = flat[torch.isfinite(flat)]
            n = finite.numel()
            if n == 0:
                return None
            lo_v, hi_v = torch.stack(torch.aminmax(finite)).tolist()
        wide = finite if finite.dtype in (torch.float32, torch.float64) else finite.float()
        sums = torch.stack([wide.sum(), torch.dot(wide, wide)])  # float32 sums at least (float64: 10× slower)
        if bins and hi_v > lo_v:
            picked = finite[::_stride(finite.numel(), sample, x.numel() // x.shape[0] if x.dim() > 1 else 1)]
            counts = torch.histc(picked if picked.dtype == wide.dtype else picked.float(), bins=bins, min=lo_v,
                                 max=hi_v)
            total, squares, *sampled = torch.cat([sums.to(counts.dtype), counts]).tolist()
            scale = n / picked.numel()
            bucket_counts = [c * scale for c in sampled]
        else:  # one value (all of it in bucket 0, (-inf, lo + 1] for TensorBoard), or no buckets
            total, squares = sums.tolist()
            bucket_counts = [float(n)] + [0.0] * (bins - 1) if bins else []
    width = (hi_v - lo_v) / bins if bins and hi_v > lo_v else 1.0
    limits = [lo_v + width * (i + 1) for i in range(bins)]
    return RawHistogram(lo_v, hi_v, n, total, squares, limits, bucket_counts)


def _stride(numel: int, sample: int, row: int) -> int:
    """The step of an even sample of at most ``sample`` of ``numel`` values, coprime with ``row`` (the
    values of one output unit): a step sharing a factor with it picks the same columns of every row
    (every 7th input of a 784-wide weight), a coprime one walks across all of them."""
    step = max(1, -(-numel // sample))
    while step > 1 and math.gcd(step, row) > 1:
        step += 1
    return step


def dead_fraction(out: Any) -> Any:
    """Share of units (dim 1, or the last dim of a 1-D output) that are zero for the whole batch; 0-dim tensor."""
    import torch

    with torch.no_grad():
        alive = out.detach() > 0
        if alive.dim() >= 2:
            alive = alive.transpose(0, 1).reshape(alive.shape[1], -1).any(dim=1)
        return 1.0 - alive.float().mean()
