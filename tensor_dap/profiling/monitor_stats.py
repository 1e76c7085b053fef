"""The numbers the monitor logs, computed on the tensors' device and read back in one transfer.

Nothing here calls ``.item()`` per parameter: norms are fused (``torch._foreach_norm``),
histograms are counted on the device (``torch.histc``) and each result comes back as one
small tensor. Very large tensors are histogrammed on an evenly strided sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

BINS = 30
SAMPLE = 2**22


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


def total_norm(tensors: list[Any]) -> Any:
    """The 2-norm over all tensors (as clip_grad_norm_ computes it), a 0-dim tensor left on the device."""
    import torch

    with torch.no_grad():
        return torch.linalg.vector_norm(_norms(tensors))


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
    """The finite values of ``x`` (a strided sample above ``sample``) in ``bins`` buckets; None if none."""
    import torch

    with torch.no_grad():
        flat = x.detach().reshape(-1)
        if flat.numel() > sample:
            flat = flat[:: -(-flat.numel() // sample)]
        flat = flat.float()
        flat = flat[torch.isfinite(flat)]
        if flat.numel() == 0:
            return None
        lo, hi = torch.aminmax(flat)
        counts = torch.histc(flat, bins=bins, min=0, max=0) if bins else flat.new_zeros(0)
        head = torch.stack([lo, hi, flat.sum(), (flat * flat).sum(), flat.new_tensor(float(flat.numel()))])
        values = torch.cat([head, counts]).tolist()
    lo_v, hi_v, total, squares, n = values[:5]
    width = (hi_v - lo_v) / bins if hi_v > lo_v else 1.0
    limits = [lo_v + width * (i + 1) for i in range(bins)]
    return RawHistogram(lo_v, hi_v, int(n), total, squares, limits, values[5:])


def dead_fraction(out: Any) -> Any:
    """Share of units (dim 1, or the last dim of a 1-D output) that are zero for the whole batch; 0-dim tensor."""
    import torch

    with torch.no_grad():
        alive = out.detach() > 0
        if alive.dim() >= 2:
            alive = alive.transpose(0, 1).reshape(alive.shape[1], -1).any(dim=1)
        return 1.0 - alive.float().mean()
