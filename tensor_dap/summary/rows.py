"""Which rows (along dim 0: the samples of a batch) of a tensor hold NaN/Inf: what a user needs to find the corrupt
record behind a non-finite batch. Read a bounded chunk at a time."""

from __future__ import annotations

from typing import Any

from ..batch_origin import dataset_rows
from ..format import plural

CHUNK = 1 << 22  # elements read at a time
SCANNED = 1 << 26  # elements read at most (a batch is far smaller; a dataset tensor handed as one is cut short)
SHOWN = 8


def nonfinite_rows(t: Any, shown: int = SHOWN) -> tuple[list[int], int, bool] | None:
    """(the first ``shown`` indices of rows holding NaN/Inf, how many rows do, whether every row was read); None for
    a tensor without rows to tell (0-d, not floating, not strided, or rows too large to read whole)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.layout != torch.strided or t.is_nested or \
            not (t.is_floating_point() or t.is_complex()) or t.device.type == "meta":
        return None
    n = int(t.shape[0])
    row = int(t[0].numel()) if n else 0
    if not row or row > CHUNK:
        return None
    step = max(1, CHUNK // row)
    found: list[int] = []
    count = read = 0
    with torch.no_grad():
        for start in range(0, n, step):
            if read >= SCANNED:
                return found, count, False
            chunk = t[start:start + step]
            bad = ~torch.isfinite(chunk.reshape(chunk.shape[0], -1)).all(1)
            rows = bad.nonzero().flatten()
            count += int(rows.numel())
            found += [start + int(r) for r in rows[:max(0, shown - len(found))].tolist()]
            read += int(chunk.numel())
    return found, count, True


def with_rows(note: str, *tensors: Any) -> str:
    """``note``, then in brackets the rows of the first of ``tensors`` with non-finite rows to tell: what a report
    about a non-finite batch says."""
    rows = next((text for t in tensors if (text := rows_text(t))), "")
    return f"{note} ({rows})" if rows else note


def rows_text(t: Any) -> str:
    """``2 rows of 16 along dim 0 hold NaN/Inf: 5, 9``, for a report's note; empty when there is nothing to tell."""
    try:
        found = nonfinite_rows(t)
    except Exception:  # noqa: BLE001 - a report says less, never fails
        return ""
    if not found or not found[1]:
        return ""
    rows, count, complete = found
    listed = _listed(rows, count)
    of = f"of {int(t.shape[0]):,}" if complete else "among the first rows read"
    said = f"{plural(count, 'row')} {of} along dim 0 {'holds' if count == 1 else 'hold'} NaN/Inf: {listed}"
    if complete and count == int(t.shape[0]) > 1:  # every row: the indices would say nothing
        said = f"all {count:,} rows along dim 0 hold NaN/Inf"
    columns = _inner_dims(t)
    if columns:  # a feature standardized by a zero std: column 3 of every row
        said += f"; the NaN/Inf only at {columns}"
    samples = dataset_rows(t, rows, lambda b: (nonfinite_rows(b) or ([], 0, False))[0])
    if samples:
        which = "index" if len(samples) == 1 else "indices"
        said += f"; the DataLoader's dataset {which} {_listed(samples, count)}"
    return said


def _listed(shown: list[int], count: int) -> str:
    """``3, 9, …``: the indices shown, with an ellipsis when ``count`` has more."""
    return ", ".join(map(str, shown)) + (", …" if count > len(shown) else "")


def masked_rows_text(t: Any) -> str:
    """``128 of 2,048 rows along the last dim are entirely -inf: index 0 of dim 2 (of 16)``: where a fully masked
    softmax row is (an attention's query with no key left: here the first position of every sequence). Only the
    dims whose indices are not all hit are named. Empty when none is, or for a tensor over ``CHUNK`` elements."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.layout != torch.strided or not t.is_floating_point() or \
            t.device.type == "meta" or not 0 < t.numel() <= CHUNK:
        return ""
    with torch.no_grad():
        bad = torch.isneginf(t).all(-1)
        count = int(bad.sum())
        if not count:
            return ""
        named = _hit_dims(bad, range(bad.dim()))
    where_text = "; ".join(named) if named else "every index of every dim"
    return (f"{count:,} of {bad.numel():,} rows along the last dim {'is' if count == 1 else 'are'} entirely -inf: "
            f"{where_text}")


def _inner_dims(t: Any) -> str:
    """``index 3 of dim 1 (of 8)``: the indices past dim 0 that hold every NaN/Inf of ``t``, where half at most do;
    empty for a tensor over ``CHUNK`` elements or with NaN/Inf at most indices."""
    import torch

    if t.dim() < 2 or not 0 < t.numel() <= CHUNK or t.is_complex():
        return ""
    with torch.no_grad():
        return "; ".join(_hit_dims(~torch.isfinite(t), range(1, t.dim()), few=True))


def _hit_dims(bad: Any, dims: range, few: bool = False) -> list[str]:
    """For each of ``dims`` where ``bad`` (a bool tensor) is true at some indices, not all (``few``: half at most, a
    clue): ``indices 0, 5 of dim 2 (of 16)``."""
    named = []
    for d in dims:
        hit = bad.any(dim=tuple(i for i in range(bad.dim()) if i != d)) if bad.dim() > 1 else bad
        where = hit.nonzero().flatten()
        if 0 < where.numel() < bad.shape[d] and not (few and where.numel() * 2 > bad.shape[d]):
            shown = _listed([int(i) for i in where[:SHOWN]], int(where.numel()))
            named.append(f"{'index' if where.numel() == 1 else 'indices'} {shown} of dim {d} (of {bad.shape[d]})")
    return named
