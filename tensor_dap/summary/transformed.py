"""Tensors inside a torch.func transform: vmap's batched tensors and grad's tracking wrappers. torch refuses to read
their values there (``.item()`` under vmap raises), so what reads values (a summary, a finiteness check) reads the
plain tensor they wrap: under vmap, every sample's values at once."""

from __future__ import annotations

from typing import Any


def unwrapped(x: Any) -> tuple[Any, tuple[str, ...]]:
    """(the plain tensor under ``x``'s torch.func wrappers, a note for each: "vmap ×16", "func.grad"); ``(x, ())`` for a
    tensor with none, the common case, told by one call."""
    import torch

    try:
        functorch = torch._C._functorch
        if not functorch.is_functorch_wrapped_tensor(x):
            return x, ()
    except Exception:  # noqa: BLE001 - a torch without functorch, or not a tensor
        return x, ()
    notes = []
    for _ in range(64):  # one wrapper per nested transform
        if not functorch.is_functorch_wrapped_tensor(x):
            break
        inner = functorch.get_unwrapped(x)
        if functorch.is_batchedtensor(x):
            dim = functorch.maybe_get_bdim(x)
            notes.append(f"vmap ×{inner.shape[dim]}" if 0 <= dim < inner.dim() else "vmap")
        else:
            notes.append("func.grad")
        x = inner
    return x, tuple(notes)


def plain(obj: Any) -> Any:
    """``obj`` with each tensor (alone, or in a tuple or list) replaced by what its torch.func wrappers hold: a
    tensor made inside a transform dies with it, its values do not."""
    if isinstance(obj, (tuple, list)):
        items = [plain(o) for o in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj  # nothing wrapped: the same object (a named tuple, torch.return_types) as it came
        try:
            return type(obj)(items)
        except TypeError:  # a named tuple's fields are positional
            return type(obj)(*items)
    return unwrapped(obj)[0]
