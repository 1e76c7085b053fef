"""The Python side of the VS Code extension's tensor inspector.

While a debugpy session is paused, the extension evaluates, in the selected frame, names
exported from ``tensor_dap`` itself (so the expression never depends on a module path)::

    __import__('tensor_dap').inspect_frame_json(locals())
    __import__('tensor_dap').inspect_tensor_json(<expr>, bins=64, heat=64)

Both return a ``str`` holding JSON (ASCII only; NaN/Inf written as the strings ``"nan"``,
``"inf"``, ``"-inf"``, like ``TensorSummary.to_dict``), which debugpy hands back as the
``repr`` of that string. Everything is computed here, on the tensor's device, so only a few
kilobytes cross the protocol: a summary per tensor, a histogram's counts, a heatmap of at most
``heat`` × ``heat`` cells. Neither function raises: a failure becomes ``{"error": "..."}``.

``inspect_frame_json`` -> ``{"version": 1, "tensors": [...], "more": N, "cut_short": bool}``, each tensor
``{"name", "expr", "line", "shape", "dtype", "device", "flags"}``: ``expr`` evaluates to the tensor
in that frame (``batch['x']`` for one inside a dict), ``line`` is the one-line summary (``null``
once the frame's time budget is spent, then ``cut_short`` is true), ``more`` counts tensors left
out past ``MAX_TENSORS``.

``inspect_tensor_json`` -> ``{"version": 1, "line", "summary", "histogram", "heatmap"}``: ``summary`` is
``TensorSummary.to_dict()``; ``histogram`` ``{"edges", "counts", "total", "nonfinite", "sampled",
"integer"}`` (``null`` for tensors without values); ``heatmap`` ``{"rows", "cols", "cells"
(row-major, ``null`` where a cell holds NaN/Inf), "min", "max", "source_shape", "slice",
"sampled"}`` for tensors of two or more dims (the first 2-D slice), else ``null``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from typing import Any, Iterator

from ..format import short_error
from ..kinds import is_tensor
from ..nested import walk
from ..summary import describe, jsonable
from ..summary.histogram import SAMPLE, histogram
from ..summary.tensor import grad_fn_name

VERSION = 1
MAX_TENSORS = 200  # a frame listing past this says how many it left out
FRAME_BUDGET_S = 0.5  # summaries stop (lines become null) once a frame has spent this
CONTAINER_ITEMS = 32  # tensors inside a list/tuple/dict local: this many per container
HIST_SAMPLE = SAMPLE  # histogram counts an evenly strided sample of at most this many values
HEAT_READ_PER_CELL = 8  # a heatmap cell averages at most this many rows and columns


def inspect_frame_json(frame_locals: dict) -> str:
    """The tensors of a frame (locals and one level into lists, tuples and dicts), as JSON."""
    try:
        return _dumps(_frame(frame_locals))
    except Exception as exc:  # noqa: BLE001 - the debugger must never see an exception from us
        return _dumps({"version": VERSION, "error": short_error(exc, limit=200)})


def inspect_tensor_json(value: Any, bins: int = 64, heat: int = 64) -> str:
    """One tensor's summary, histogram and heatmap, as JSON."""
    try:
        return _dumps(_tensor(value, max(1, min(int(bins), 512)), max(1, min(int(heat), 256))))
    except Exception as exc:  # noqa: BLE001
        return _dumps({"version": VERSION, "error": short_error(exc, limit=200)})


# ------------------------------------------------------------------ frame

def _frame(frame_locals: dict) -> dict:
    torch = sys.modules.get("torch")
    if torch is None:  # a program that never imported torch holds no tensors; do not import it here
        return {"version": VERSION, "tensors": [], "more": 0, "cut_short": False}
    start = time.perf_counter()
    rows, more, cut_short = [], 0, False
    for name, expr, t in _tensors(frame_locals):
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


def _tensors(frame_locals: dict) -> Iterator[tuple[str, str, Any]]:
    """(name, expression, tensor): the locals, and one level into their containers (a few items each)."""
    for name, value in list(frame_locals.items()):
        if not isinstance(name, str) or name.startswith("__"):
            continue
        for path, t in walk(value, name, max_depth=1, limit=CONTAINER_ITEMS + 1):
            yield path, path, t


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
        flags.append(grad_fn_name(t))
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
            out["histogram"] = _histogram(x, bins)
            if x.dim() >= 2 and x.numel() > 0:
                out["heatmap"] = _heatmap(x, heat, torch)
    return out


def _has_values(x: Any) -> bool:
    if not is_tensor(x):
        return False
    torch = sys.modules["torch"]
    if x.is_nested or x.layout != torch.strided or x.is_quantized or x.device.type == "meta":
        return False
    return "Fake" not in type(x).__name__


def _histogram(x: Any, bins: int) -> dict:
    """The summary's histogram as JSON data; no finite value gives empty counts (and the non-finite count)."""
    h = histogram(x, bins=bins, sample=HIST_SAMPLE)
    if h is not None:
        return dataclasses.asdict(h)
    n = x.numel()
    return {"edges": [], "counts": [], "total": 0, "nonfinite": n if n <= HIST_SAMPLE else None,
            "sampled": n > HIST_SAMPLE, "integer": not (x.dtype.is_floating_point or x.dtype.is_complex)}


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
    return json.dumps(jsonable(data), allow_nan=False, separators=(",", ":"))
