"""``describe(x)``: any tensor into a ``TensorSummary``, in one bounded pass; never raises.

A failure becomes a summary carrying a short error note and whatever metadata could still
be read, so no view ever sees an exception from a tensor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

from ..format import short_error
from .budget import DEFAULT_BUDGET, VALUES_SHOWN, Budget, single_threaded
from .held import held_bytes, is_sparse, sparse_parts
from .model import TensorSummary
from .transformed import unwrapped


def describe(x: Any, *, budget: Optional[Budget] = None, grad: bool = True) -> TensorSummary:
    """Summarize any tensor; never raises.

    ``grad=True`` also summarizes a populated ``.grad`` (one level deep).
    """
    budget = budget or DEFAULT_BUDGET
    try:
        # a time-capped summary runs on this thread alone: a descheduled intra-op worker would stall it
        threads = single_threaded() if budget.max_ms is not None else contextlib.nullcontext()
        with no_torch_function(), threads:
            return _describe(x, budget, grad)
    except Exception as exc:  # the debugger must never see an exception from us
        with no_torch_function():
            return _fallback(x, exc)


def no_torch_function() -> Any:
    """A context in which a tensor subclass's ``__torch_function__`` does not run: reading metadata or
    data through it must never run user code (a subclass that logs, sleeps or counts)."""
    import sys

    torch = sys.modules.get("torch")
    disable = getattr(getattr(torch, "_C", None), "DisableTorchFunctionSubclass", None)
    return disable() if disable is not None else contextlib.nullcontext()


def describe_many(xs: List[Any], *, budget: Optional[Budget] = None) -> List[TensorSummary]:
    """``[describe(x) for x in xs]``, with the stats of small plain CPU tensors computed together
    (a checkpoint of thousands of small tensors lists several times faster). Never raises."""
    budget = budget or DEFAULT_BUDGET
    try:
        from ._batch import batch_stats, batchable

        with no_torch_function(), single_threaded():  # tiny ops: threads only add stalls
            small = [i for i, x in enumerate(xs) if batchable(x)]
            known = dict(zip(small, batch_stats([xs[i] for i in small])))
    except Exception:  # the debugger must never see an exception from us: describe each one instead
        known = {}
    out = []
    for i, x in enumerate(xs):
        try:
            with no_torch_function():
                out.append(_describe(x, budget, True, known.get(i)) if known.get(i) else describe(x, budget=budget))
        except Exception as exc:  # noqa: BLE001 - as describe: a summary carrying the error
            out.append(_fallback(x, exc))
    return out


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
    import torch

    if type(x) in (torch.Tensor, torch.nn.Parameter):
        return False
    name = type(x).__name__
    if name in ("FakeTensor", "FunctionalTensor"):
        return True
    try:
        from torch._subclasses.fake_tensor import is_fake

        return bool(is_fake(x))
    except Exception:
        return False


def _past_module_hooks(fn: Any, output_nr: int) -> Any:
    """The op that made a value, not the pass-through node a module's full backward hook puts after it
    (``BackwardHookFunctionBackward``: torch's plumbing, also there while tensor_dap localizes a NaN)."""
    for _ in range(8):  # one node per module whose output it is: nested modules stack them
        if fn is None or type(fn).__name__ != "BackwardHookFunctionBackward":
            return fn
        try:
            nxt, output_nr = fn.next_functions[output_nr]
        except Exception:  # noqa: BLE001 - an unexpected node shape: name the hook node itself
            return fn
        if nxt is None:
            return fn
        fn = nxt
    return fn


def grad_fn_name(x: Any) -> Optional[str]:
    """``AddmmBackward0``: the name of the op that made ``x`` (None for a leaf), past module hooks' nodes."""
    fn = _past_module_hooks(x.grad_fn, x.output_nr)
    return type(fn).__name__ if fn is not None else None


def _grad_state(x: Any) -> Tuple[Dict[str, Any], Any]:
    state: Dict[str, Any] = {"requires_grad": bool(x.requires_grad), "is_leaf": bool(x.is_leaf)}
    state["grad_fn"] = grad_fn_name(x)
    grad_tensor = None
    if x.is_leaf:  # reading .grad of a non-leaf warns and is always None; of a leaf it never warns
        grad_tensor = x.grad
    state["has_grad"] = grad_tensor is not None
    return state, grad_tensor


def _describe(x: Any, budget: Budget, want_grad: bool, known: Any = None) -> TensorSummary:
    """The summary of ``x``; ``known`` is its (Stats, values) when already computed (``describe_many``)."""
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
    plain, transforms = unwrapped(x)  # inside vmap / grad: read the values they wrap
    if transforms:
        notes.extend(transforms)
        summary = _describe(plain, budget, False)  # (its numbers over every sample of a vmap, its values too many)
        numel = int(x.numel())
        try:  # a sample's strides (vmap's own: the wrapped tensor's hold the batch dim too)
            base.update(stride=tuple(int(s) for s in x.stride()), is_contiguous=bool(x.is_contiguous()))
        except Exception:  # noqa: BLE001 - a wrapper that does not say: the wrapped tensor's
            pass
        if any(t.startswith("vmap") for t in transforms):  # a batched tensor has no storage of its own to name
            base["storage_bytes"] = None
        return dataclasses.replace(summary, **base, shape=tuple(int(s) for s in x.shape), numel=numel,
                                   nbytes=numel * x.element_size(), notes=(*notes, *summary.notes),
                                   values=summary.values if plain.numel() == numel else None)

    base["layout"] = str(x.layout).replace("torch.", "").lstrip("_")  # (torch._mkldnn)
    base["shape"] = tuple(int(s) for s in x.shape)
    numel = int(x.numel())
    base["numel"] = numel
    itemsize = x.element_size() if not x.is_sparse else x.dtype.itemsize
    base["nbytes"] = numel * itemsize

    if x.device.type == "meta" or _is_fake(x):
        notes.append("meta" if x.device.type == "meta" else "fake")
        return TensorSummary(**base, notes=tuple(notes))

    if is_sparse(x):
        return _describe_sparse(x, base, notes, budget)
    if x.layout != torch.strided:  # mkldnn (an inference layout): read through a dense copy, when a small one
        base["is_contiguous"] = False
        if numel > budget.chunk_elements:
            return TensorSummary(**base, notes=tuple(notes), error=f"{base['layout']}: not read (over "
                                 f"{budget.chunk_elements:,} elements, it would be copied to read)")
        return _with_stats(x.to_dense(), base, notes, budget, stats_of="values")

    base["stride"] = tuple(int(s) for s in x.stride())
    base["is_contiguous"] = bool(x.is_contiguous())
    try:
        base["storage_bytes"] = int(x.untyped_storage().nbytes())
    except Exception:
        pass

    if x.is_quantized:  # dequantized one chunk at a time by the stats pass
        notes.append(f"quantized {str(x.qscheme()).replace('torch.', '')}")
        return _with_stats(x, base, notes, budget, stats_of="dequantized")
    if 0 in base["stride"] and numel > 1 and any(n > 1 for n, st in zip(base["shape"], base["stride"]) if st == 0):
        notes.append("expanded")
    return _with_stats(plain_view(x), base, notes, budget,
                       stats_of="magnitude" if x.is_complex() else "values", known=known)


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


def _whole_numbers(data: Any) -> bool:
    """An integer dtype (not bool, not quantized: those read as their dequantized reals)."""
    dtype = data.dtype
    return not (dtype.is_floating_point or dtype.is_complex or data.is_quantized) and str(dtype) != "torch.bool"


def _with_stats(data: Any, base: Dict[str, Any], notes: list, budget: Budget, stats_of: str,
                presampled: bool = False, known: Any = None) -> TensorSummary:
    """Attach stats of ``data``; ``presampled`` says ``data`` is already a sample of the tensor."""


    numel = data.numel()
    if numel == 0:
        return TensorSummary(**base, notes=tuple(notes), stats_of=stats_of)
    if known is not None:
        stats, values = known
    else:
        stats, values = _computed(data, budget)
    lo, hi = stats.min, stats.max
    if _whole_numbers(data):  # token ids, labels, indices: 18327 against a vocabulary of 18328, not 1.83e4
        lo, hi = (int(v) if v is not None and abs(v) < 2**53 else v for v in (lo, hi))  # beyond: floats rounded
    return TensorSummary(
        **base,
        min=lo, max=hi, mean=stats.mean, std=stats.std,
        nan=stats.nan, pos_inf=stats.pos_inf, neg_inf=stats.neg_inf, counts_exact=stats.counts_exact,
        has_nan=stats.has_nan, has_pos_inf=stats.has_pos_inf, has_neg_inf=stats.has_neg_inf,
        all_zero=_all_zero(stats, presampled),
        stats_of=stats_of, stats_count=stats.count, sampled=stats.sampled or presampled,
        range_exact=stats.range_exact and not presampled,
        values=values, notes=tuple(notes),
    )


def _computed(data: Any, budget: Budget) -> Tuple[Any, Optional[Tuple[Any, ...]]]:
    """(Stats, the values of a tensor of at most VALUES_SHOWN elements) on the tensor's own device."""
    import torch

    from . import _device, _stats

    numel = data.numel()
    with torch.no_grad():
        data = data.detach()
        if data.device.type == "cpu":
            stats = _stats.cpu_stats(data, budget)
            values = _small_values(data) if numel <= VALUES_SHOWN else None
        else:
            stats, raw = _device.packed_stats(data, budget, VALUES_SHOWN)
            values = _unpack_values(raw, data) if raw is not None else None
    return stats, values


def _all_zero(stats: Any, presampled: bool) -> Optional[bool]:
    """Known from the range alone: every element is zero iff the exact range is [0, 0] with no NaN/Inf."""
    if stats.has_nan or stats.has_pos_inf or stats.has_neg_inf or not (stats.min == 0 and stats.max == 0):
        return False
    return None if presampled or not stats.range_exact else True


def _small_values(data: Any) -> Tuple[Any, ...]:
    flat = (data.dequantize() if data.is_quantized else data).reshape(-1)
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
    values, _ = sparse_parts(x)
    base["nnz"] = int(x._nnz())
    base["nbytes"] = held_bytes(x)
    base["is_contiguous"] = False
    summary = _with_stats(values, base, notes, budget, stats_of="stored values")
    # values of the stored entries are not the tensor's elements: do not show them as such
    return dataclasses.replace(summary, values=None, all_zero=None if summary.all_zero is None else
                               (summary.all_zero or base["nnz"] == 0))


def _describe_nested(x: Any, base: Dict[str, Any], notes: list, budget: Budget) -> TensorSummary:
    """A nested tensor from its packed buffer: component shapes are metadata, values one flat view."""
    import torch

    notes.append("nested")
    base["layout"] = str(x.layout).replace("torch.", "")
    base["is_contiguous"] = False
    if x.layout == torch.jagged:
        base["shape"] = tuple(d if isinstance(d, int) else None for d in x.shape)
        flat, sampled = x.values(), False
    else:
        flat, sampled = _strided_nested(x, base, budget)
    base["numel"] = int(flat.numel()) if not sampled else base["numel"]
    base["nbytes"] = base["numel"] * x.element_size()
    summary = _with_stats(flat, base, notes, budget, stats_of="magnitude" if x.is_complex() else "values",
                          presampled=sampled)
    return dataclasses.replace(summary, values=None)


def _strided_nested(x: Any, base: Dict[str, Any], budget: Budget) -> Tuple[Any, bool]:
    """(the elements as one flat tensor, whether it is a sample) of a strided-layout nested tensor.

    Packed components are one slice of the storage (no copy, however many components there are);
    otherwise evenly spaced components are copied, up to the budget.
    """
    import torch

    sizes = x._nested_tensor_size()
    count = int(sizes.shape[0])
    if count == 0 or sizes.shape[1] == 0:
        base["shape"], base["numel"] = (count,) + tuple(None for _ in range(int(sizes.shape[1]))), count
        return torch.empty(0, dtype=x.dtype), False
    fixed = (sizes.min(0).values == sizes.max(0).values).tolist()
    base["shape"] = (count,) + tuple(int(d) if same else None for d, same in zip(sizes[0].tolist(), fixed))
    numel = int(sizes.prod(1).sum())
    base["numel"] = numel
    packed = packed_nested(x, sizes, numel)
    if packed is not None:
        return packed, False
    cap = budget.exact_elements
    step = max(1, math.ceil(numel / cap)) if cap is not None else 1
    with torch.no_grad():
        parts = [x[i].detach().reshape(-1) for i in range(0, count, step)]
    return torch.cat(parts), step > 1


def packed_nested(x: Any, sizes: Any = None, numel: Optional[int] = None) -> Any:
    """The values of a strided-layout nested tensor as one slice of its storage (no copy) when its
    components tile that slice exactly, else None."""
    import torch

    sizes = x._nested_tensor_size() if sizes is None else sizes
    if int(sizes.shape[0]) == 0 or sizes.shape[1] == 0:
        return None
    numel = int(sizes.prod(1).sum()) if numel is None else numel
    starts = x._nested_tensor_storage_offsets()
    ends = starts + ((sizes - 1) * x._nested_tensor_strides()).sum(1) + 1
    first, last = int(starts.min()), int(ends.max())
    if last - first != numel:
        return None
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage(), first, (numel,))


__all__ = ["describe", "describe_many", "plain_view", "summarize"]
