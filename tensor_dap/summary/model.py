"""The summary model: ``TensorSummary``, pure data that every view renders.

Every renderer (the one-line text, rich tables in pdb, DAP children in VS Code, JSON
for the extension) reads a ``TensorSummary``; none of them computes statistics.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple



@dataclass(frozen=True)
class TensorSummary:
    kind: str  # "tensor", "Parameter" or the subclass name
    shape: Optional[Tuple[Optional[int], ...]]  # None entries are ragged (nested) dims
    dtype: str  # torch's name, e.g. "torch.float32"
    device: str
    numel: int
    nbytes: int
    layout: str = "strided"
    requires_grad: bool = False
    is_leaf: bool = True
    has_grad: bool = False
    grad_fn: Optional[str] = None
    grad: Optional["TensorSummary"] = None
    stride: Optional[Tuple[int, ...]] = None
    is_contiguous: bool = True
    storage_bytes: Optional[int] = None
    min: Optional[float] = None
    max: Optional[float] = None
    mean: Optional[float] = None
    std: Optional[float] = None
    nan: Optional[int] = None  # exact when counts_exact, else estimated from the elements read
    pos_inf: Optional[int] = None
    neg_inf: Optional[int] = None
    counts_exact: bool = True
    has_nan: bool = False
    has_pos_inf: bool = False
    has_neg_inf: bool = False
    all_zero: Optional[bool] = None
    stats_of: str = "values"  # "values", "magnitude" (complex), "stored values" (sparse), "dequantized"
    stats_count: int = 0  # finite elements the moments stand for (mean and std are of the finite values)
    sampled: bool = False
    range_exact: bool = True
    values: Optional[Tuple[Any, ...]] = None  # flattened, only when numel <= VALUES_SHOWN
    nnz: Optional[int] = None
    notes: Tuple[str, ...] = ()  # "meta", "fake", "nested", "quantized", "inference", ...
    error: Optional[str] = None

    @property
    def has_stats(self) -> bool:
        """Values were read: finite ones for moments, or only NaN/Inf."""
        return self.stats_count > 0 or self.nonfinite

    @property
    def nonfinite(self) -> bool:
        return self.has_nan or self.has_pos_inf or self.has_neg_inf

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-ready data (NaN/Inf become strings, tuples become lists)."""
        return jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TensorSummary":
        """Rebuild a summary written by ``to_dict`` (e.g. an incident bundle read back from disk)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: from_json_number(v) for k, v in data.items() if k in names}
        for key in ("shape", "stride", "notes"):
            if kw.get(key) is not None:
                kw[key] = tuple(kw[key])
        if kw.get("values") is not None:
            kw["values"] = tuple(complex(*map(from_json_number, v)) if isinstance(v, list) else from_json_number(v)
                                 for v in kw["values"])
        if isinstance(kw.get("grad"), dict):
            kw["grad"] = cls.from_dict(kw["grad"])
        return cls(**kw)

    def __str__(self) -> str:
        from .line import one_line  # the data never imports its views at module level

        return one_line(self)


def jsonable(value: Any) -> Any:
    """Plain JSON data from dataclass dicts: NaN/Inf become strings, tuples lists, complex pairs."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, complex):
        return [jsonable(value.real), jsonable(value.imag)]
    return value


def from_json_number(value: Any) -> Any:
    """The inverse of ``jsonable`` for one number: 'nan'/'inf'/'-inf' become floats again."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value
