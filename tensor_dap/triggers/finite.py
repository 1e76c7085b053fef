"""Is a tensor finite, and where not: NaN or Inf, read in bounded pieces whatever its size, strides or layout.

Every check of a re-run (each op's outputs, the diagnoses' reads of an op's inputs) goes through here, so a
tensor of gigabytes or an attention mask broadcast over the batch costs a few MB of temporaries at most.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from ..summary.held import is_sparse, sparse_parts
from ..summary.transformed import unwrapped


def _float(t: torch.Tensor) -> bool:
    return (t.is_floating_point() or t.is_complex()) and t.layout == torch.strided and t.device.type != "meta" \
        and t.numel() > 0


def kind_of(t: Any) -> str | None:
    """"nan", "inf", or None for a finite (or non-float) tensor or float (a loss kept as its value:
    ``forwards.loss_value``). Sparse tensors by their stored values, nested ones by their packed buffer."""
    if not isinstance(t, torch.Tensor):
        return ("nan" if t != t else "inf") if isinstance(t, float) and not math.isfinite(t) else None
    if is_sparse(t):
        t = sparse_parts(t)[0]
    elif t.is_nested:  # (read as finite before, whatever it held)
        t = t.values()
    if not _float(t):
        return None
    with torch.no_grad():
        t = _distinct(t)
        if t.numel() <= SLICE_ELEMENTS:
            if bool(torch.isfinite(t).all()):
                return None
            return "nan" if bool(torch.isnan(t).any()) else "inf"
        if bool(torch.isfinite(t.sum())):  # no temporary: a NaN/Inf anywhere makes the sum non-finite
            return None
        inf = False  # the sum is NaN/Inf, or only overflowed: look slice by slice
        for piece in slices(t, SLICE_ELEMENTS):
            if not bool(torch.isfinite(piece).all()):
                if bool(torch.isnan(piece).any()):
                    return "nan"
                inf = True
        return "inf" if inf else None


SLICE_ELEMENTS = 1 << 22  # larger tensors are looked at in slices: temporaries stay a few MB whatever the size


def pieces(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """``t``'s own values (broadcast dims narrowed) in views of at most ``SLICE_ELEMENTS``, rows kept whole where a
    row fits: what a test over a whole tensor reads to keep its temporaries bounded."""
    return slices(_distinct(t), SLICE_ELEMENTS)


def anywhere(t: torch.Tensor, test: Any) -> bool:
    """``test`` (a piece -> a bool tensor) true of some piece of ``t`` (``pieces``): no whole-tensor temporary."""
    with torch.no_grad():
        return any(bool(test(piece)) for piece in pieces(t))


def _distinct(t: torch.Tensor) -> torch.Tensor:
    """``t`` without its broadcast dimensions (stride 0): an expanded attention mask, its own values only; inside
    vmap / grad, the values they wrap (every sample's: torch refuses to read a batched tensor's)."""
    t = unwrapped(t)[0]
    for d in range(t.dim()):
        if t.stride(d) == 0 and t.size(d) > 1:
            t = t.narrow(d, 0, 1)
    return t


def slices(t: torch.Tensor, limit: int) -> Iterator[torch.Tensor]:
    """Views of ``t``, each of at most ``limit`` elements, that together cover it once."""
    if t.numel() <= limit or t.dim() == 0:
        yield t
        return
    if t.dim() == 1:
        for i in range(0, t.shape[0], limit):
            yield t[i:i + limit]
        return
    row = t[0].numel()
    if row > limit:
        for sub in t.unbind(0):
            yield from slices(sub, limit)
        return
    step = max(1, limit // max(1, row))
    for i in range(0, t.shape[0], step):
        yield t[i:i + step]


def spread(t: torch.Tensor, n: int) -> torch.Tensor:
    """A copy of at most ``n`` of ``t``'s elements, evenly spread over it in its logical order: what tells later
    whether a tensor changed, in bounded bytes whatever its size or strides (no flattened copy of it is made).
    Nothing is read to the host."""
    t = t.detach()
    numel = t.numel()
    index = torch.arange(0, numel, max(1, numel // n), device=t.device)[:n]
    return torch.take(t, index)


def max_abs(tensors: list[torch.Tensor]) -> float | None:
    """The largest finite magnitude among ``tensors`` (sparse ones by their stored values), or None; read in
    ``pieces``."""
    best = None
    with torch.no_grad():
        for t in tensors:
            if is_sparse(t):
                t = sparse_parts(t)[0]
            if not _float(t) or t.is_complex():
                continue
            for piece in pieces(t):
                finite = piece[torch.isfinite(piece)]
                if finite.numel():
                    value = float(finite.abs().max())
                    best = value if best is None or value > best else best
    return best if best is None or math.isfinite(best) else None
