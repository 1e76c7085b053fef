"""The Python side of the VS Code extension's tensor inspector.

While a debugpy session is paused, the extension evaluates, in the selected frame::

    __import__('tensor_dap.dap.inspector', fromlist=['_']).frame_json(locals())
    __import__('tensor_dap.dap.inspector', fromlist=['_']).tensor_json(<expr>, bins=64, heat=64)

Both return a ``str`` holding JSON (ASCII only; NaN/Inf written as the strings ``"nan"``,
``"inf"``, ``"-inf"``, like ``TensorSummary.to_dict``), which debugpy hands back as the
``repr`` of that string. Everything is computed here, on the tensor's device, so only a few
kilobytes cross the protocol: a summary per tensor, a histogram's counts, a heatmap of at most
``heat`` × ``heat`` cells. Neither function raises: a failure becomes ``{"error": "..."}``.

``frame_json`` -> ``{"version": 1, "tensors": [...], "more": N, "cut_short": bool}``, each tensor
``{"name", "expr", "line", "shape", "dtype", "device", "flags"}``: ``expr`` evaluates to the tensor
in that frame (``batch['x']`` for one inside a dict), ``line`` is the one-line summary (``null``
once the frame's time budget is spent, then ``cut_short`` is true), ``more`` counts tensors left
out past ``MAX_TENSORS``.

``tensor_json`` -> ``{"version": 1, "line", "summary", "histogram", "heatmap"}``: ``summary`` is
``TensorSummary.to_dict()``; ``histogram`` ``{"edges", "counts", "total", "nonfinite", "sampled",
"integer"}`` (``null`` for tensors without values); ``heatmap`` ``{"rows", "cols", "cells"
(row-major, ``null`` where a cell holds NaN/Inf), "min", "max", "source_shape", "slice",
"sampled"}`` for tensors of two or more dims (the first 2-D slice), else ``null``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Iterator

from tensor_dap import describe

VERSION = 1
MAX_TENSORS = 200  # a frame listing past this says how many it left out
FRAME_BUDGET_S = 0.5  # summaries stop (lines become null) once a frame has spent this
CONTAINER_ITEMS = 32  # tensors inside a list/tuple/dict local: this many per container
HIST_SAMPLE = 1 << 20  # histogram counts an evenly strided sample of at most this many values
HEAT_READ_PER_CELL = 8  # a heatmap cell averages at most this many rows and columns


def frame_json(frame_locals: dict) -> str:
    """The tensors of a frame (locals and one level into lists, tuples and dicts), as JSON."""
    try:
        return _dumps(_frame(frame_locals))
    except Exception as exc:  # noqa: BLE001 - the debugger must never see an exception from us
        return _dumps({"version": VERSION, "error": _short(exc)})


def tensor_json(value: Any, bins: int = 64, heat: int = 64) -> str:
    """One tensor's summary, histogram and heatmap, as JSON."""
    try:
        return _dumps(_tensor(value, max(1, min(int(bins), 512)), max(1, min(int(heat), 256))))
    except Exception as exc:  # noqa: BLE001
        return _dumps({"version": VERSION, "error": _short(exc)})


# ------------------------------------------------------------------ frame

def _frame(frame_locals: dict) -> dict:
    torch = sys.modules.get("torch")
    if torch is None:  # a program that never imported torch holds no tensors; do not import it here
        return {"version": VERSION, "tensors": [], "more": 0, "cut_short": False}
    start = time.perf_counter()
    rows, more, cut_short = [], 0, False
    for name, expr, t in _tensors(frame_locals, torch.Tensor):
        if len(rows) >= MAX_TENSORS:
            more += 1
            continue
        line = None
        if time.perf_counter() - start < FRAME_BUDGET_S:
            line = str(describe(t, grad=False))
        else:
            cut_short = True
        rows.append({"name": name, "expr": expr, "line": line, **_meta(t)})
    return {"version": VERSION, "tensors": rows, "more": more, "cut_short": cut_short}


def _tensors(frame_locals: dict, tensor_type: type) -> Iterator[tuple[str, str, Any]]:
    for name, value in list(frame_locals.items()):
        if not isinstance(name, str) or name.startswith("__"):
            continue
        if isinstance(value, tensor_type):
            yield name, name, value
        elif isinstance(value, dict):
            for key, item in _first(value.items()):
                if isinstance(item, tensor_type) and isinstance(key, (str, int)) and not isinstance(key, bool):
                    yield f"{name}[{key!r}]", f"{name}[{key!r}]", item
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(_first(value)):
                if isinstance(item, tensor_type):
                    yield f"{name}[{i}]", f"{name}[{i}]", item


def _first(items: Any) -> list:
    out = []
    for item in items:
        if len(out) >= CONTAINER_ITEMS:
            break
        out.append(item)
    return out


def _meta(t: Any) -> dict:
    """Shape, dtype, device and flags: metadata only, never a value read."""
    flags = []
    try:
        shape = [int(s) for s in t.shape]
    except Exception:  # noqa: BLE001 - nested tensors have ragged dims
        shape = None
    if t.requires_grad:
        flags.append("requires_grad")
    if t.grad_fn is not None:
        flags.append(type(t.grad_fn).__name__)
    if t.is_leaf and getattr(t, "_grad", None) is not None:
        flags.append("has .grad")
    if type(t).__name__ != "Tensor":
        flags.append(type(t).__name__)
    return {"shape": shape, "dtype": str(t.dtype).replace("torch.", ""), "device": str(t.device), "flags": flags}


# ------------------------------------------------------------------ one tensor

def _tensor(value: Any, bins: int, heat: int) -> dict:
    summary = describe(value)
    out = {"version": VERSION, "line": str(summary), "summary": summary.to_dict(), "histogram": None, "heatmap": None}
    if _has_values(value):
        import torch

        with torch.no_grad():
            x = value.detach()
            out["histogram"] = _histogram(x, bins, torch)
            if x.dim() >= 2 and x.numel() > 0:
                out["heatmap"] = _heatmap(x, heat, torch)
    return out


def _has_values(x: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    if x.is_nested or x.layout != torch.strided or x.is_quantized or x.device.type == "meta":
        return False
    return "Fake" not in type(x).__name__


def _histogram(x: Any, bins: int, torch: Any) -> dict | None:
    flat, sampled = _sample_flat(x, HIST_SAMPLE)
    if flat.is_complex():
        flat = flat.abs()
    integer = not flat.dtype.is_floating_point and not flat.is_complex()
    values = flat.to(torch.float64 if flat.dtype in (torch.float64, torch.int64) else torch.float32)
    finite = values[torch.isfinite(values)]
    nonfinite = int(values.numel() - finite.numel())
    if finite.numel() == 0:
        return {"edges": [], "counts": [], "total": 0, "nonfinite": nonfinite, "sampled": sampled, "integer": integer}
    lo, hi = (float(v) for v in torch.stack(list(torch.aminmax(finite))).tolist())
    if integer and hi - lo + 1 <= bins:
        bins, lo, hi = int(hi - lo + 1), lo - 0.5, hi + 0.5  # one bin per value: labels, token ids
    elif lo == hi:
        bins, lo, hi = 1, lo - 0.5, hi + 0.5
    counts = torch.histc(finite, bins=bins, min=lo, max=hi).tolist()
    step = (hi - lo) / bins
    return {"edges": [lo + i * step for i in range(bins)] + [hi], "counts": [int(c) for c in counts],
            "total": int(finite.numel()), "nonfinite": nonfinite, "sampled": sampled, "integer": integer}


def _sample_flat(x: Any, limit: int) -> tuple[Any, bool]:
    """At most ``limit`` evenly spread elements as a 1-D tensor, copying no more than those."""
    n = x.numel()
    if n <= limit:
        return x.reshape(-1), False
    if x.is_contiguous():
        return x.view(-1)[:: math.ceil(n / limit)], True
    # A strided view per dim: reshape(-1) of the whole would copy it.
    big = [d for d in range(x.dim()) if x.shape[d] > 1]
    step = math.ceil((n / limit) ** (1 / len(big)))
    while math.prod(math.ceil(x.shape[d] / step) for d in big) > limit:
        step += 1
    view = x[tuple(slice(None, None, step) if d in big else slice(None) for d in range(x.dim()))]
    return view.reshape(-1), True


def _heatmap(x: Any, heat: int, torch: Any) -> dict:
    lead = x.dim() - 2
    m = x[(0,) * lead] if lead else x  # the first 2-D slice, a view
    rows, cols = int(m.shape[0]), int(m.shape[1])
    sr = max(1, math.ceil(rows / (heat * HEAT_READ_PER_CELL)))
    sc = max(1, math.ceil(cols / (heat * HEAT_READ_PER_CELL)))
    m = m[::sr, ::sc]
    if m.is_complex():
        m = m.abs()
    m = m.to(torch.float64 if m.dtype == torch.float64 else torch.float32)
    out_r, out_c = min(heat, m.shape[0]), min(heat, m.shape[1])
    pooled = torch.nn.functional.adaptive_avg_pool2d(m[None, None], (out_r, out_c))[0, 0]
    finite = pooled[torch.isfinite(pooled)]
    lo_hi = torch.stack(list(torch.aminmax(finite))).tolist() if finite.numel() else [None, None]
    cells = [v if math.isfinite(v) else None for v in pooled.reshape(-1).tolist()]
    index = "".join(["0, "] * lead)
    return {"rows": out_r, "cols": out_c, "cells": cells, "min": lo_hi[0], "max": lo_hi[1],
            "source_shape": [int(s) for s in x.shape], "slice": f"[{index}:, :]" if lead else "",
            "sampled": sr > 1 or sc > 1}


# ------------------------------------------------------------------ JSON

def _dumps(data: Any) -> str:
    return json.dumps(_clean(data), allow_nan=False, separators=(",", ":"))


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
