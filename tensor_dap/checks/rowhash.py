"""Content hashes of rows, so two splits can be compared without holding either in memory twice.

Each value becomes a canonical 64-bit code first, the same in both splits: integers and floats
compare by value (``1 == 1.0``, ``-0.0 == 0.0``, every NaN equal to every NaN), datetimes by their
instant, anything else by Python's ``hash`` (equal values, equal hashes). A row's hash mixes its
columns' codes with a per-column salt. Rows are read in chunks of ``CHUNK_VALUES`` values, so
the working memory is a few chunks (about 16 MB) plus 8 bytes a row, whatever the split's size.
"""

from __future__ import annotations

import math
from typing import Any

from .tabular import Table, numpy

CHUNK_VALUES = 1 << 19
_NAN_HASH = 0x7FF8_0000_0000_0001


def how(*kinds: str) -> str:
    """How columns of these numpy dtype kinds compare across splits: int, float, complex, time or object."""
    found = set(kinds)
    if found <= set("biu"):
        return "int"
    if found <= set("biuf"):
        return "float"
    if found <= set("biufc"):
        return "complex"
    if found in ({"M"}, {"m"}):
        return "time"
    return "object"


def _mix(x: Any) -> Any:
    """splitmix64's finalizer over a uint64 array: every input bit moves every output bit."""
    np = numpy()
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _float_codes(block: Any) -> Any:
    np = numpy()
    f = np.array(block, dtype=np.float64) + 0.0  # a copy; + 0.0 turns -0.0 into 0.0
    f[np.isnan(f)] = np.nan  # one NaN bit pattern
    return f.view(np.uint64)


def _pyhash(value: Any) -> int:
    if isinstance(value, float) and math.isnan(value):
        return _NAN_HASH
    try:
        return hash(value)
    except TypeError:  # a list or dict inside a cell
        return hash(repr(value))


def codes(block: Any, kind: str) -> Any:
    """A (rows, width) block as canonical uint64 codes: equal values, equal codes (exact for numbers)."""
    np = numpy()
    block = np.asarray(block)
    if kind == "int":
        return block.astype(np.int64).view(np.uint64)
    if kind == "float":
        return _float_codes(block)
    if kind == "complex":
        c = block.astype(np.complex128)
        with np.errstate(over="ignore"):
            return _float_codes(c.real) * np.uint64(3) + _mix(_float_codes(c.imag))
    if kind == "time":
        unit = "datetime64[ns]" if block.dtype.kind == "M" else "timedelta64[ns]"
        return block.astype(unit).view(np.int64).view(np.uint64)
    flat = np.fromiter((_pyhash(v) for v in block.ravel()), dtype=np.int64, count=block.size)
    return flat.view(np.uint64).reshape(block.shape)


def plan(tables: list[Table], names: list[str]) -> dict[str, str]:
    """Column name -> how it is compared, agreed between the splits (a float in one makes it float in all)."""
    kinds: dict[str, list[str]] = {n: [] for n in names}
    for table in tables:
        for group, idx in table.select(names):
            for i in idx:
                kinds[group.names[i]].append(group.kind)
    return {n: how(*k) for n, k in kinds.items()}


def row_hashes(table: Table, hows: dict[str, str]) -> Any:
    """One uint64 per row over the columns in ``hows``; equal rows (by value) get equal hashes."""
    np = numpy()
    salt = {name: np.uint64((i + 1) * 0x9E3779B97F4A7C15 % (1 << 64)) for i, name in enumerate(hows)}
    h = np.zeros(table.rows, dtype=np.uint64)
    for group, idx in table.select(list(hows)):
        salts = np.array([salt[group.names[i]] for i in idx], dtype=np.uint64)
        kind = hows[group.names[idx[0]]]
        step = max(1, CHUNK_VALUES // len(idx))
        for start in range(0, table.rows, step):
            stop = min(table.rows, start + step)
            block = np.asarray(group.read(start, stop)).reshape(stop - start, -1)
            if len(idx) != block.shape[1]:
                block = block[:, idx]
            with np.errstate(over="ignore"):
                h[start:stop] += _mix(codes(block, kind) + salts[None, :]).sum(axis=1, dtype=np.uint64)
    for start in range(0, table.rows, CHUNK_VALUES):  # in chunks: _mix's temporaries stay chunk-sized
        h[start:start + CHUNK_VALUES] = _mix(h[start:start + CHUNK_VALUES])
    return h


def row(table: Table, hows: dict[str, str], i: int) -> list[Any]:
    """Row ``i``'s values over the columns in ``hows``, in ``hows`` order, as canonical codes for numbers
    (exact) and the values themselves otherwise."""
    np = numpy()
    out: dict[str, Any] = {}
    for group, idx in table.select(list(hows)):
        values = np.asarray(group.read(i, i + 1)).reshape(1, -1)[:, idx]
        kind = hows[group.names[idx[0]]]
        for name, v in zip((group.names[j] for j in idx), (codes(values, kind) if kind != "object" else values)[0]):
            out[name] = int(v) if kind != "object" else v
    return [out[n] for n in hows]


def _equal(x: Any, y: Any) -> bool:
    if x is y:
        return True
    try:
        return bool(x == y) or bool(x != x and y != y)  # NaN equals NaN here
    except Exception:  # noqa: BLE001 - pandas.NA and friends refuse to be truth-tested
        return repr(x) == repr(y)


def same_row(a: list[Any], b: list[Any]) -> bool:
    """Exact equality of two ``row`` results (NaN equal to NaN)."""
    return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
