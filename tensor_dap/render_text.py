"""The one-line text form of a summary: dense, scannable, alarms standing out."""

from __future__ import annotations

import math
from typing import Any, List, Optional

from .summary import VALUES_SHOWN, TensorSummary

_DTYPES = {
    "float32": "", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3uz",
    "float8_e5m2fnuz": "f8e5m2uz", "float8_e8m0fnu": "f8e8m0",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool": "bool", "complex32": "c32", "complex64": "c64", "complex128": "c128",
}


def short_dtype(dtype: str) -> str:
    """'torch.bfloat16' -> 'bf16'; float32 (the default) -> ''."""
    name = dtype.replace("torch.", "")
    return _DTYPES.get(name, name)


def dtype_name(dtype: str) -> str:
    """'torch.float32' -> 'f32': for tables and module lines, where the default dtype is named too."""
    return short_dtype(dtype) or "f32"


def fmt_num(v: Optional[float]) -> str:
    """3-4 significant digits; scientific for very large or very small magnitudes."""
    if v is None:
        return "?"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, complex):
        sign = "+" if v.imag >= 0 or math.isnan(v.imag) else "-"
        return f"{fmt_num(v.real)}{sign}{fmt_num(abs(v.imag))}j"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    text = f"{v:.4g}"
    if a >= 1e5 or a < 1e-3 or "e" in text:
        mant, exp = f"{v:.2e}".split("e")
        mant = mant.rstrip("0").rstrip(".")
        return f"{mant}e{int(exp)}"
    return text


def fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(size)} B"
            return f"{size:.1f} {unit}" if size < 10 else f"{size:.0f} {unit}"
        size /= 1024
    return f"{n} B"


def fmt_count(n: Optional[int], present: bool) -> str:
    """A NaN/Inf count, or (when the time cap cut the count short) 'yes' if one was seen, else '?'."""
    if n is not None:
        return str(n)
    return "yes" if present else "?"


def fmt_shape(shape: Any) -> str:
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def head(s: TensorSummary) -> str:
    """kind[shape] dtype device: the part every view starts with."""
    parts = [s.kind + fmt_shape(s.shape)]
    dtype = short_dtype(s.dtype)
    if dtype:
        parts.append(dtype)
    if s.device not in ("cpu", "meta", "-", "?"):
        parts.append(s.device)
    return " ".join(parts)


def stats_text(s: TensorSummary) -> List[str]:
    """Range, mean and std (or the values of a bool tensor) as tokens."""
    if not s.has_stats:
        return []
    approx = "≈" if s.sampled else "="
    if s.dtype == "torch.bool":
        return [f"{fmt_num(100 * s.mean)}% true" if s.mean is not None else ""]
    if s.all_zero:
        return ["all zeros"]
    tokens = []
    if s.min is not None and s.max is not None:
        var = "|x|" if s.stats_of == "magnitude" else "x"
        tokens.append(f"{var}{'∈' if s.range_exact else '≈'}[{fmt_num(s.min)}, {fmt_num(s.max)}]")
    if s.mean is not None:
        tokens.append(f"μ{approx}{fmt_num(s.mean)}")
    mean_is_finite = s.mean is None or math.isfinite(s.mean)  # else σ is NaN and says nothing more
    if s.std is not None and s.stats_count > 1 and mean_is_finite:
        tokens.append(f"σ{approx}{fmt_num(s.std)}")
    return tokens


def alarms(s: TensorSummary) -> List[str]:
    out = []
    if s.has_nan:
        out.append("NaN!")
    if s.has_pos_inf:
        out.append("+Inf!")
    if s.has_neg_inf:
        out.append("-Inf!")
    return out


def grad_flags(s: TensorSummary) -> List[str]:
    out = []
    if s.requires_grad:
        out.append("grad")
    if s.grad_fn:
        out.append(s.grad_fn)
    if s.has_grad:
        out.append("has .grad")
    return out


def one_line(s: TensorSummary) -> str:
    parts = [head(s)]
    if s.error and s.error == "not a tensor":
        return f"{s.kind} (not a tensor)"
    if s.layout not in ("strided", "jagged"):
        parts.append(s.layout)
    if s.nnz is not None:
        parts.append(f"nnz={s.nnz}")
    parts.extend(n for n in s.notes if n != "inference")
    if "meta" in s.notes or "fake" in s.notes:
        pass  # shape only: there are no values to describe
    elif s.shape == () and s.values:
        parts.append(fmt_num(s.values[0]))
    elif s.numel == 0 and s.shape is not None and not s.error:
        parts.append("empty")
    else:
        if s.numel > VALUES_SHOWN:
            parts.append(f"n={s.numel}")
            if s.nbytes:
                parts.append(f"({fmt_bytes(s.nbytes)})")
        parts.extend(stats_text(s))
    parts.extend(alarms(s))
    parts.extend(grad_flags(s))
    if "inference" in s.notes:
        parts.append("inference")
    if s.values is not None and s.shape != ():
        parts.append("[" + ", ".join(fmt_num(v) for v in s.values) + "]")
    if s.error:
        parts.append(f"<{s.error}>")
    return " ".join(p for p in parts if p)
