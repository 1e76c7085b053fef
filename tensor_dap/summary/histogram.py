"""A small histogram of a tensor's finite values, for the ``stats`` view.

Computed here, drawn by a renderer. Counting happens on the tensor's device and only the
range and the counts come back (a few scalars); a very large tensor is counted on an
evenly strided sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

BINS = 12
SAMPLE = 2**24


@dataclass(frozen=True)
class Histogram:
    edges: tuple[float, ...]  # len(counts) + 1 bin edges, ascending
    counts: tuple[int, ...]
    total: int  # finite values counted
    nonfinite: int  # NaN/Inf values left out
    sampled: bool
    integer: bool  # one bin per integer value (labels, token ids)


def histogram(x: Any, *, bins: int = BINS, sample: int = SAMPLE) -> Histogram | None:
    """Counts of the finite values of ``x`` in ``bins`` equal bins; None for non-numeric or empty tensors.
    A tensor subclass's ``__torch_function__`` does not run."""
    from .tensor import no_torch_function

    with no_torch_function():
        return _histogram(x, bins, sample)


def _histogram(x: Any, bins: int, sample: int) -> Histogram | None:
    import torch

    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_quantized or x.is_meta:
        return None
    from ._views import reached, sample_view

    with torch.no_grad():
        seen = reached(x.detach())  # a broadcast view: its storage's histogram, each count times its repeats
        flat, repeat = (seen.data, seen.repeat) if not seen.overlapping else (x.detach(), 1)
        sampled = flat.numel() > sample
        if sampled and not flat.is_contiguous():
            flat = sample_view(flat, sample)  # flattening first would copy the whole tensor
        flat = flat.reshape(-1)
        if sampled:
            flat = flat[:: math.ceil(flat.numel() / sample)]
        if flat.is_complex():
            flat = flat.abs()  # on the sample only
        integer = not (flat.dtype.is_floating_point or flat.dtype.is_complex)
        values = flat.to(torch.float64 if flat.dtype in (torch.float64, torch.int64) else torch.float32)
        finite = values[torch.isfinite(values)]
        if finite.numel() == 0:
            return None
        lo_hi = torch.stack([finite.min(), finite.max()]).tolist()
        lo, hi = float(lo_hi[0]), float(lo_hi[1])
        if integer and hi - lo + 1 <= bins:
            bins = int(hi - lo + 1)
            lo, hi = lo - 0.5, hi + 0.5
        elif lo == hi:
            bins = 1
            lo, hi = lo - 0.5, hi + 0.5
        counts = torch.histc(finite, bins=bins, min=lo, max=hi).tolist()
    step = (hi - lo) / bins
    edges = tuple(lo + i * step for i in range(bins)) + (hi,)
    return Histogram(edges=edges, counts=tuple(int(c) * repeat for c in counts), total=int(finite.numel()) * repeat,
                     nonfinite=int(values.numel() - finite.numel()) * repeat, sampled=sampled,
                     integer=integer and step == 1.0)
