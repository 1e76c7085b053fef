"""``kind[shape] dtype device`` of a tensor read from its metadata alone: how batches and datasets name
their tensors without reading (or summarizing) any data."""

from __future__ import annotations

from typing import Any

from ..format import fmt_shape, short_dtype
from .tensor import no_torch_function


def tensor_head(x: Any) -> str:
    """``tensor[32, 784]``, ``tensor[32] i64``, ``Parameter[8] bf16 cuda:0``; ``[?]`` for a shape that cannot
    be read. A subclass's ``__torch_function__`` does not run."""
    with no_torch_function():
        return _tensor_head(x)


def _tensor_head(x: Any) -> str:
    name = {"Tensor": "tensor"}.get(type(x).__name__, type(x).__name__)
    try:
        shape = fmt_shape(tuple(int(d) for d in x.shape))
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        shape = "[?]"
    parts = [name + shape]
    try:
        dtype = short_dtype(str(x.dtype))
        device = str(x.device)
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        dtype, device = "?", "?"
    if dtype:
        parts.append(dtype)
    if device not in ("cpu", "meta"):
        parts.append(device)
    return " ".join(parts)
