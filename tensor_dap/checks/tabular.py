"""Rows and columns of a data split, whatever holds them: tensors, numpy arrays, frames, dicts of columns.

Duck-typed: a *frame* is anything with ``columns`` whose items ``frame[name]`` convert to numpy
(pandas, polars, ...), so no dataframe library is a dependency. Rows of a tensor or array are its
first dimension, its other dimensions flattened into columns. Tensors are read chunk by chunk
(``block``), so a CUDA split never goes to the host in one piece.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from ..kinds import is_tensor


class TableError(ValueError):
    """The input cannot be read as rows and columns; the message says what was expected."""


@dataclass(frozen=True)
class Group:
    """Columns that are read together: one column of a frame, or all columns of an array."""

    names: tuple[str, ...]
    kind: str  # numpy dtype kind of the values: 'f', 'i', 'u', 'b', 'c', 'M', 'm', 'O', 'U', 'S'
    read: Callable[[int, int], Any]  # (start, stop) -> numpy array of shape (stop - start, len(names))
    column: Callable[[int], Any]  # position -> that one column, 1-D (the others are not read)


@dataclass(frozen=True)
class Table:
    what: str  # 'tensor[1000, 20]', 'DataFrame 1000×5', for messages
    rows: int
    groups: tuple[Group, ...]
    named: bool = False  # columns have names (a frame, a dict), not only positions

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(n for g in self.groups for n in g.names)

    def select(self, names: list[str]) -> list[tuple[Group, list[int]]]:
        """(group, positions inside it) for the named columns, grouped, in table order."""
        wanted = set(names)
        out = []
        for g in self.groups:
            idx = [i for i, n in enumerate(g.names) if n in wanted]
            if idx:
                out.append((g, idx))
        return out

    def column(self, name: str) -> Any:
        """One whole column as a 1-D numpy array (n values: bounded by the split's length)."""
        for g in self.groups:
            if name in g.names:
                return g.column(g.names.index(name))
        raise TableError(f"no column {name!r}")


def numpy() -> Any:
    """numpy, imported on first use: the doctor (same package) must run where numpy is broken or missing."""
    import numpy as np

    return np


def _tensor_kind(t: Any) -> str:
    if t.dtype.is_complex:
        return "c"
    if t.dtype.is_floating_point:
        return "f"
    return "b" if str(t.dtype) == "torch.bool" else "i"


def _host(part: Any) -> Any:
    """A piece of a tensor as a numpy array on the host (dtypes numpy lacks widened to float32)."""
    import torch

    part = part.detach()
    if part.is_sparse:
        part = part.to_dense()
    if part.dtype in (torch.bfloat16, torch.float16) or str(part.dtype).startswith("torch.float8"):
        part = part.float()
    return part.resolve_conj().resolve_neg().cpu().numpy()


def _tensor_group(t: Any, names: tuple[str, ...]) -> Group:
    import torch

    if t.device.type == "meta":
        raise TableError("a tensor on the meta device has no values to compare")
    inner = tuple(int(d) for d in t.shape[1:])

    def read(start: int, stop: int) -> Any:  # one chunk of rows goes to the host at a time
        if t.layout != torch.strided:  # sparse: no views, but rows can be gathered
            return _host(t.index_select(0, torch.arange(start, stop, device=t.device))).reshape(stop - start, -1)
        return _host(t.narrow(0, start, stop - start)).reshape(stop - start, -1)

    def column(i: int) -> Any:
        if t.layout != torch.strided:
            step = max(1, (1 << 16) // max(1, len(names)))
            return numpy().concatenate([read(s, min(s + step, len(t)))[:, i] for s in range(0, len(t), step)])
        index, rest = [], i
        for size in reversed(inner):  # the flat column position as an index into the trailing dims
            index.append(rest % size)
            rest //= size
        return _host(t[(slice(None), *reversed(index))] if inner else t).reshape(-1)

    return Group(names, _tensor_kind(t), read, column)


def _array_group(a: Any, names: tuple[str, ...]) -> Group:
    flat = a.reshape(a.shape[0], -1) if a.ndim != 2 else a  # a view when contiguous

    def read(start: int, stop: int) -> Any:
        return flat[start:stop]

    def column(i: int) -> Any:
        return flat[:, i]

    return Group(names, a.dtype.kind, read, column)


def _width(shape: tuple[int, ...]) -> int:
    width = 1
    for d in shape[1:]:
        width *= int(d)
    return width


def _block(value: Any, prefix: str) -> tuple[int, Group]:
    """A tensor or array as one group of columns named prefix + index."""
    np = numpy()
    if is_tensor(value):
        shape = tuple(value.shape)
        if not shape:
            raise TableError("a 0-d tensor has no rows")
        names = tuple(f"{prefix}{j}" for j in range(_width(shape)))
        return shape[0], _tensor_group(value, names)
    arr = np.asarray(value)
    if arr.ndim == 0:
        raise TableError(f"expected rows, got a single {type(value).__name__}")
    if arr.dtype.names:  # a structured array: its fields are columns
        raise TableError("structured arrays: pass a dict of columns, {name: arr[name] for name in arr.dtype.names}")
    return arr.shape[0], _array_group(arr, tuple(f"{prefix}{j}" for j in range(_width(arr.shape))))


def _column_array(value: Any) -> Any:
    np = numpy()
    if is_tensor(value):
        return value
    to_numpy = getattr(value, "to_numpy", None)
    arr = to_numpy() if callable(to_numpy) else np.asarray(value)
    return arr if arr.ndim == 1 else arr.reshape(arr.shape[0], -1)


def _columns_table(what: str, items: list[tuple[str, Any]]) -> Table:
    groups, lengths = [], set()
    for name, value in items:
        arr = _column_array(value)
        n, g = _block(arr, name)
        if len(g.names) == 1:
            g = Group((name,), g.kind, g.read, g.column)
        groups.append(g)
        lengths.add(n)
    if len(lengths) > 1:
        raise TableError(f"columns of different lengths: {sorted(lengths)}")
    return Table(what, lengths.pop() if lengths else 0, tuple(groups), named=True)


def as_table(data: Any) -> Table:
    """``data`` as rows and columns, or TableError saying what would be accepted."""
    columns = getattr(data, "columns", None)
    if columns is not None and not is_tensor(data) and hasattr(data, "__getitem__"):
        names = [str(c) for c in list(columns)]
        if len(set(names)) != len(names):
            raise TableError("the frame has duplicate column names")
        shape = getattr(data, "shape", None)
        what = f"{type(data).__name__} {shape[0]:,}×{shape[1]}" if shape is not None and len(shape) == 2 else \
            type(data).__name__
        return _columns_table(what, [(str(c), data[c]) for c in list(columns)])
    if isinstance(data, Mapping):
        return _columns_table(f"dict of {len(data)} columns", [(str(k), v) for k, v in data.items()])
    tensors = getattr(data, "tensors", None)  # torch.utils.data.TensorDataset
    if isinstance(tensors, tuple) and tensors and all(is_tensor(t) for t in tensors):
        data = tensors
    if isinstance(data, tuple) and data and all(is_tensor(t) or hasattr(t, "shape") for t in data):
        blocks = [_block(part, f"{k}.") for k, part in enumerate(data)]
        lengths = {n for n, _ in blocks}
        if len(lengths) > 1:
            raise TableError(f"the parts of the tuple have different lengths: {sorted(lengths)}")
        return Table(f"tuple of {len(data)}", lengths.pop(), tuple(g for _, g in blocks))
    try:
        n, group = _block(data, "")
    except TableError:
        raise
    except Exception as exc:  # noqa: BLE001 - np.asarray on an arbitrary object
        raise TableError(f"cannot read {type(data).__name__} as rows: pass a tensor, a numpy array, a dataframe "
                         f"or a dict of columns ({type(exc).__name__})") from None
    shape = tuple(data.shape) if hasattr(data, "shape") else (n,)
    return Table(f"{type(data).__name__}[{', '.join(map(str, shape))}]", n, (group,))


def resolve(table: Table, column: Any, role: str) -> str:
    """The name of ``column`` (a name, or an integer position) in ``table``; TableError if it has none."""
    names = table.columns
    if isinstance(column, int) and not isinstance(column, bool) and str(column) not in names:
        if -len(names) <= column < len(names):
            return names[column]
    if str(column) in names:
        return str(column)
    shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    raise TableError(f"{role} has no column {column!r} (columns: {shown})")
