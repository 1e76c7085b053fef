"""Ids and classes out of range: ``IndexError: Target 3 is out of bounds`` (cross_entropy, nll_loss) and ``index out
of range in self`` (an Embedding). torch names the value, never the table or the number of classes it missed."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from ...format import fmt_shape
from . import static
from .evaluator import Evaluator
from .model import Operand
from .source import call_arguments, callee_name
from .static import is_module, is_tensor

MAX_READ = 50_000_000  # elements of the ids read for their range, at most (the crash report's bounded cost)
CHUNK = 1 << 20  # elements read at a time: each temporary is at most a chunk
IGNORE_INDEX = -100  # cross_entropy's default: targets holding it are skipped, not out of range


def range_hint(ev: Evaluator, node: ast.AST) -> str:
    """"`y` holds classes 0–3 but `model(x)` gives 3 (0–2): ..." for the failing call ``node``; '' when unknown."""
    if not isinstance(node, ast.Call):
        return ""
    nodes = call_arguments(node)
    ids = [(n, v) for n, v in ((n, ev.value_of(n)) for n in nodes) if is_tensor(v) and _integer(v)]
    if not ids:
        return ""
    ids_node, values = ids[-1]
    bounds = _bounds(values)
    if bounds is None:
        return ""
    low, high = bounds
    text = ast.unparse(ids_node)
    callee, name = ev.value_of(node.func), callee_name(node.func)
    rows = getattr(callee, "num_embeddings", None) if is_module(callee) else None
    table = f"`{ast.unparse(node.func)}` is an Embedding of {rows} rows"
    floats = [(n, tuple(static.tensor_attribute(v, "shape"))) for n, v in ((n, ev.value_of(n)) for n in nodes)
              if is_tensor(v) and not _integer(v)]
    if rows is None and name == "embedding" and floats and len(floats[0][1]) == 2:  # F.embedding(input, weight)
        rows = floats[0][1][0]
        table = f"`{ast.unparse(floats[0][0])}` has {rows} rows"
    if isinstance(rows, int):
        return (f"`{text}` holds ids {low}–{high} but {table} (ids 0–{rows - 1}): the vocabulary is larger than "
                "the table (num_embeddings must be the vocabulary's size, from the same tokenizer)")
    if not ("cross_entropy" in name or "nll_loss" in name) or not floats or not floats[0][1]:
        return ""
    scores, shape = floats[0]
    classes = shape[1] if len(shape) >= 2 else shape[0]
    return (f"`{text}` holds classes {low}–{high} but `{ast.unparse(scores)}` scores {classes} classes "
            f"(0–{classes - 1}): targets must run from 0 to the number of classes - 1 (labels numbered from 1? "
            "a head with too few outputs?)")


_INDEX = re.compile(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)")


def index_hint(tensors: list[Operand], message: str) -> str:
    """An index past a dim: the tensor with that size there, its valid indices, and the usual causes."""
    found = _INDEX.search(message)
    if found is None:
        return ""
    index, dim, size = (int(g) for g in found.groups())
    o = next((t for t in tensors if t.shape is not None and len(t.shape) > dim and t.shape[dim] == size), None)
    what = f"`{o.expr}` {fmt_shape(o.shape)} has" if o is not None and o.shape is not None else "the tensor has"
    valid = f"0–{size - 1}, or -{size}–-1" if size else "none: it is empty"
    return (f"{what} {size} items along dim {dim} (indices {valid}), and index {index} was asked: an off-by-one "
            "(range(1, n + 1), a length used as an index), or a count taken from another tensor")


def _integer(t: Any) -> bool:
    dtype = static.tensor_attribute(t, "dtype")
    return not (dtype.is_floating_point or dtype.is_complex) and str(dtype) != "torch.bool"


def _bounds(t: Any) -> tuple[int, int] | None:
    """The smallest and largest id (cross_entropy's ignore_index left out); None for a tensor not read here."""
    found = value_range(t, ignore=IGNORE_INDEX)
    return None if found is None or found[2] == -1 else (int(found[0]), int(found[1]))


def value_range(t: Any, ignore: int | None = None) -> tuple[float, float, int] | None:
    """(min, max, NaN count) of a CPU tensor's values, ``ignore`` left out, read ``CHUNK`` elements at a time (no
    temporary larger than a chunk); None for a tensor not read here (an accelerator's: a failed kernel leaves nothing
    readable there; past ``MAX_READ``; a large non-contiguous one); a NaN count of -1 when no value is left."""
    shape = static.tensor_attribute(t, "shape")
    if static.tensor_attribute(t, "device").type != "cpu" or math.prod(shape) > MAX_READ or not math.prod(shape):
        return None
    import torch

    with torch.no_grad():
        t = torch.Tensor.detach(t)
        if not t.is_contiguous() and t.numel() > CHUNK:
            return None
        flat, low, high, nans, kept = t.reshape(-1), math.inf, -math.inf, 0, False
        real = flat.is_floating_point()
        for start in range(0, flat.numel(), CHUNK):
            chunk = flat[start:start + CHUNK]
            if ignore is not None:
                chunk = chunk[chunk != ignore]
            if real:
                nans += int(chunk.isnan().sum())
                chunk = chunk[~chunk.isnan()]
            if chunk.numel():
                kept = True
                low, high = min(low, float(chunk.min())), max(high, float(chunk.max()))
    if not kept:
        return (math.nan, math.nan, nans) if nans else (math.nan, math.nan, -1)
    return low, high, nans
