"""The one-line text form of a summary: dense, scannable, alarms standing out."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, List

from ..format import fmt_bytes, fmt_count, fmt_num, fmt_shape, short_dtype
from .budget import VALUES_SHOWN

if TYPE_CHECKING:  # the data does not import its views, nor the views the data at run time
    from .model import TensorSummary

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
        var = {"magnitude": "|x|", "stored values": "values"}.get(s.stats_of, "x")  # (a sparse tensor's zeros: not in)
        tokens.append(f"{var}{'∈' if s.range_exact else '≈'}[{fmt_num(s.min)}, {fmt_num(s.max)}]")
    if s.mean is not None:
        if s.nonfinite:  # NaN/Inf are left out of the moments, and said to be
            tokens.append("finite")
        tokens.append(f"μ{approx}{fmt_num(s.mean)}")
    mean_is_finite = s.mean is None or math.isfinite(s.mean)  # else σ is NaN and says nothing more
    if s.std is not None and s.stats_count > 1 and mean_is_finite:
        tokens.append(f"σ{approx}{fmt_num(s.std)}")
    return tokens


def nonfinite_counts(s: TensorSummary) -> List[tuple]:
    """(label, count text, present) for NaN, +Inf and -Inf: exact, ``≈`` estimated, or unknown."""
    return [(label, fmt_count(n, present, s.counts_exact), present) for label, n, present in
            (("NaN", s.nan, s.has_nan), ("+Inf", s.pos_inf, s.has_pos_inf), ("-Inf", s.neg_inf, s.has_neg_inf))]


def alarms(s: TensorSummary) -> List[str]:
    """``NaN!×3``, ``+Inf!×≈1.2e4``: the kinds present and how many (just ``NaN!`` when not counted)."""
    return [f"{label}!" + (f"×{text}" if text not in ("yes", "?") else "")
            for label, text, present in nonfinite_counts(s) if present]


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
