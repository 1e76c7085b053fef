"""``describe(x)``: any tensor into a ``TensorSummary``, in one bounded pass; never raises.

A failure becomes a summary carrying a short error note and whatever metadata could still
be read, so no view ever sees an exception from a tensor.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Dict, Optional, Tuple

from ..format import short_error
from .budget import DEFAULT_BUDGET, VALUES_SHOWN, Budget
from .model import TensorSummary


def describe(x: Any, *, budget: Optional[Budget] = None, grad: bool = True) -> TensorSummary:
    """Summarize any tensor; never raises.

    ``grad=True`` also summarizes a populated ``.grad`` (one level deep).
    """
    try:
        return _describe(x, budget or DEFAULT_BUDGET, grad)
    except Exception as exc:  # the debugger must never see an exception from us
        return _fallback(x, exc)


def summarize(x: Any, *, budget: Optional[Budget] = None) -> str:
    """The one-line summary of ``x`` as a string."""
    return str(describe(x, budget=budget))


def _fallback(x: Any, exc: BaseException) -> TensorSummary:
    """Whatever metadata can still be read, plus the error."""

    def attempt(fn, default):
        try:
            return fn()
        except Exception:
            return default

    shape = attempt(lambda: tuple(int(s) for s in x.shape), None)
    return TensorSummary(
        kind=attempt(lambda: _kind(x), type(x).__name__),
        shape=shape,
        dtype=attempt(lambda: str(x.dtype), "?"),
        device=attempt(lambda: str(x.device), "?"),
        numel=attempt(lambda: int(x.numel()), 0),
        nbytes=0,
        error=short_error(exc),
    )


def _kind(x: Any) -> str:
    import torch

    if type(x) is torch.Tensor:
        return "tensor"
    if type(x) is torch.nn.Parameter:
        return "Parameter"
    return type(x).__name__


def _is_fake(x: Any) -> bool:
    name = type(x).__name__
    if name in ("FakeTensor", "FunctionalTensor"):
        return True
    try:
        from torch._subclasses.fake_tensor import is_fake

        return bool(is_fake(x))
    except Exception:
        return False


def _grad_state(x: Any) -> Tuple[Dict[str, Any], Any]:
    state: Dict[str, Any] = {"requires_grad": bool(x.requires_grad), "is_leaf": bool(x.is_leaf)}
    fn = x.grad_fn
    state["grad_fn"] = type(fn).__name__ if fn is not None else None
    grad_tensor = None
    if x.is_leaf:  # reading .grad of a non-leaf warns and is always None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grad_tensor = x.grad
    state["has_grad"] = grad_tensor is not None
    return state, grad_tensor


def _describe(x: Any, budget: Budget, want_grad: bool) -> TensorSummary:
    import torch

    if not isinstance(x, torch.Tensor):
        return TensorSummary(kind=type(x).__name__, shape=None, dtype="-", device="-", numel=0, nbytes=0,
                             error="not a tensor")
    base: Dict[str, Any] = {"kind": _kind(x), "dtype": str(x.dtype), "device": str(x.device)}
    notes = []
    state, grad_tensor = _grad_state(x)
    base.update(state)
    if want_grad and grad_tensor is not None:
        base["grad"] = describe(grad_tensor, budget=budget, grad=False)
    if torch.is_inference(x):
        notes.append("inference")

    if x.is_nested:
        return _describe_nested(x, base, notes, budget)

    base["layout"] = str(x.layout).replace("torch.", "")
    base["shape"] = tuple(int(s) for s in x.shape)
    numel = int(x.numel())
    base["numel"] = numel
    itemsize = x.element_size() if not x.is_sparse else x.dtype.itemsize
    base["nbytes"] = numel * itemsize

    if x.device.type == "meta" or _is_fake(x):
        notes.append("meta" if x.device.type == "meta" else "fake")
        return TensorSummary(**base, notes=tuple(notes))

    if x.layout != torch.strided:
        return _describe_sparse(x, base, notes, budget)

    base["stride"] = tuple(int(s) for s in x.stride())
    base["is_contiguous"] = bool(x.is_contiguous())
    try:
        base["storage_bytes"] = int(x.untyped_storage().nbytes())
    except Exception:
        pass

    if x.is_quantized:
        notes.append(f"quantized {str(x.qscheme()).replace('torch.', '')}")
        from ._stats import sample_view

        cap = budget.exact_elements
        sampled = cap is not None and numel > cap
        with torch.no_grad():  # dequantizing copies: copy only the sample
            data = (sample_view(x, cap) if sampled else x).dequantize()
        return _with_stats(data, base, notes, budget, stats_of="dequantized", presampled=sampled)

    return _with_stats(plain_view(x), base, notes, budget,
                       stats_of="magnitude" if x.is_complex() else "values")


def plain_view(x: Any) -> Any:
    """``x`` as a plain tensor, so a subclass's data is read without running its __torch_function__ overrides."""
    import torch

    if type(x) in (torch.Tensor, torch.nn.Parameter):
        return x
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return x.as_subclass(torch.Tensor)
    except Exception:
        return x


def _with_stats(data: Any, base: Dict[str, Any], notes: list, budget: Budget, stats_of: str,
                presampled: bool = False) -> TensorSummary:
    """Attach stats of ``data``; ``presampled`` says ``data`` is already a sample of the tensor."""
    import torch

    from . import _stats

    numel = data.numel()
    if numel == 0:
        return TensorSummary(**base, notes=tuple(notes), stats_of=stats_of)
    with torch.no_grad():
        data = data.detach()
        if data.device.type == "cpu":
            stats = _stats.cpu_stats(data, budget)
            values = _small_values(data) if numel <= VALUES_SHOWN else None
        else:
            stats, raw = _stats.packed_stats(data, budget, VALUES_SHOWN)
            values = _unpack_values(raw, data) if raw is not None else None
    return TensorSummary(
        **base,
        min=stats.min, max=stats.max, mean=stats.mean, std=stats.std,
        nan=stats.nan, pos_inf=stats.pos_inf, neg_inf=stats.neg_inf,
        has_nan=stats.has_nan, has_pos_inf=stats.has_pos_inf, has_neg_inf=stats.has_neg_inf,
        all_zero=None if presampled else _all_zero(stats),
        stats_of=stats_of, stats_count=stats.count, sampled=stats.sampled or presampled,
        range_exact=stats.range_exact and not presampled,
        values=values, notes=tuple(notes),
    )


def _all_zero(stats: Any) -> Optional[bool]:
    if stats.sampled or stats.has_nan or stats.has_pos_inf or stats.has_neg_inf:
        return None if stats.sampled else False
    return stats.min == 0 and stats.max == 0


def _small_values(data: Any) -> Tuple[Any, ...]:
    flat = data.reshape(-1)
    if flat.dtype.is_floating_point and flat.dtype.itemsize == 1:  # float8 has no tolist()
        flat = flat.float()
    return tuple(flat.tolist())


def _unpack_values(raw: list, data: Any) -> Tuple[Any, ...]:
    if data.is_complex():
        return tuple(complex(raw[i], raw[i + 1]) for i in range(0, len(raw), 2))
    if data.dtype.is_floating_point:
        return tuple(raw)
    if str(data.dtype) == "torch.bool":
        return tuple(bool(v) for v in raw)
    return tuple(int(v) for v in raw)


def _describe_sparse(x: Any, base: Dict[str, Any], notes: list, budget: Budget) -> TensorSummary:
    import torch

    if x.layout == torch.sparse_coo:
        values = x._values()
        indices_bytes = x._indices().numel() * x._indices().element_size()
    else:
        values = x.values()
        if x.layout in (torch.sparse_csr, torch.sparse_bsr):
            idx = (x.crow_indices(), x.col_indices())
        else:
            idx = (x.ccol_indices(), x.row_indices())
        indices_bytes = sum(t.numel() * t.element_size() for t in idx)
    base["nnz"] = int(x._nnz())
    base["nbytes"] = values.numel() * values.element_size() + indices_bytes
    base["is_contiguous"] = False
    summary = _with_stats(values, base, notes, budget, stats_of="stored values")
    # values of the stored entries are not the tensor's elements: do not show them as such
    return dataclasses.replace(summary, values=None, all_zero=None if summary.all_zero is None else
                               (summary.all_zero or base["nnz"] == 0))


def _describe_nested(x: Any, base: Dict[str, Any], notes: list, budget: Budget) -> TensorSummary:
    import torch

    notes.append("nested")
    parts = x.unbind()
    shapes = [tuple(p.shape) for p in parts]
    dims = max((len(s) for s in shapes), default=0)
    ragged = tuple(
        shapes[0][d] if shapes and all(len(s) == dims and s[d] == shapes[0][d] for s in shapes) else None
        for d in range(dims)
    )
    base["shape"] = (len(parts),) + ragged
    base["layout"] = str(x.layout).replace("torch.", "")
    numel = sum(p.numel() for p in parts)
    base["numel"] = int(numel)
    base["nbytes"] = int(numel * x.element_size())
    base["is_contiguous"] = False
    cap = budget.exact_elements
    sampled = cap is not None and numel > cap
    if sampled:  # concatenating copies: copy evenly spaced components up to the budget
        step = max(1, math.ceil(numel / cap))
        parts = parts[::step]
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in parts]) if parts else torch.empty(0, dtype=x.dtype)
    summary = _with_stats(flat, base, notes, budget, stats_of="magnitude" if x.is_complex() else "values",
                          presampled=sampled)
    return dataclasses.replace(summary, values=None)


__all__ = ["describe", "plain_view", "summarize"]
