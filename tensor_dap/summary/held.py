"""The bytes a tensor holds, whatever its layout: what ``mem`` ranks and what a summary's size says. A sparse
tensor holds its stored values and their indices, not ``numel × itemsize`` (torch refuses ``nbytes`` for it);
a broadcast view holds its storage, not its logical size."""

from __future__ import annotations

from typing import Any


def is_sparse(x: Any) -> bool:
    """Any sparse layout (``Tensor.is_sparse`` is true for COO only)."""
    import torch

    return x.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def sparse_members(x: Any) -> list[tuple[str, Any, str]]:
    """(name, tensor, how to get it from ``x``) of a sparse tensor's stored values, then its index tensors."""
    import torch

    if x.layout == torch.sparse_coo:  # (``values()`` refuses an uncoalesced tensor; ``_values()`` never does)
        return [("values", x._values(), "._values()"), ("indices", x._indices(), "._indices()")]
    names = ("crow_indices", "col_indices") if x.layout in (torch.sparse_csr, torch.sparse_bsr) else \
        ("ccol_indices", "row_indices")
    return [("values", x.values(), ".values()"), *((n, getattr(x, n)(), f".{n}()") for n in names)]


def sparse_parts(x: Any) -> tuple[Any, tuple[Any, ...]]:
    """(stored values, index tensors) of a sparse tensor of any sparse layout."""
    members = [t for _, t, _ in sparse_members(x)]
    return members[0], tuple(members[1:])


def held_bytes(t: Any) -> int:
    """The memory ``t`` holds (0 where it cannot be told): a sparse tensor's values and indices, a nested tensor's
    buffer, else its logical size or its storage's when that is smaller (a broadcast view of 2^31 elements over
    64 KiB holds 64 KiB)."""
    try:
        if t.device.type == "meta":
            return 0
        if is_sparse(t):
            values, indices = sparse_parts(t)
            return sum(int(p.numel()) * int(p.element_size()) for p in (values, *indices))
        try:
            storage: int | None = int(t.untyped_storage().nbytes())
        except Exception:  # noqa: BLE001 - no single storage (mkldnn, a functional or fake tensor)
            storage = None
        if t.is_nested:
            return storage or 0
        logical = int(t.numel()) * int(t.element_size())
        return logical if storage is None else min(logical, storage)
    except Exception:  # noqa: BLE001 - a layout or subclass with no size to read
        return 0
