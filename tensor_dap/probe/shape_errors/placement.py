"""Operands on different devices or in different dtypes. torch names two devices (``found at least two devices,
cuda:0 and cpu!``) or two dtypes (``mat1 and mat2 must have the same dtype, but got Double and Float``), not which
operand is which: the hint does, a module by its parameters'. Ids and class targets of a float dtype (``expected
target dtype to be Long``, an Embedding's ``indices``) are said to need an integer one."""

from __future__ import annotations

import ast
from typing import Any

from ...summary.modules import named_tensors
from .evaluator import Evaluator
from .model import Operand
from .static import is_module

MODULE_TENSORS = 10_000  # of a module's parameters and buffers looked at for their devices/dtypes, at most
FIX = {
    "device": "put the model and each batch on one device (`model.to(device)` once, `x = x.to(device)` for each "
              "batch, and tensors made in forward with `device=x.device`)",
    "dtype": "make them one dtype (a numpy array is float64: `torch.from_numpy(a).float()`, or `x.to(torch.float32)`; "
             "under mixed precision, compute inside `torch.autocast`)",
}
INTEGER_WANTED = ("expected target dtype to be Long", "expected scalar type Long", "'indices' to have one of the "
                  "following scalar types")


def placement_hint(ev: Evaluator, node: ast.AST, operands: list[Operand], what: str, message: str = "") -> str:
    """"`x` is on cuda:0 but `model`'s parameters are on cpu: ..." (``what``: "device" or "dtype"); '' when the
    operands show one."""
    if what == "dtype" and any(text in message for text in INTEGER_WANTED):
        return _integer_hint(operands, ids="indices" in message)
    places: dict[str, list[str]] = {}
    for o in operands:
        value = o.device if what == "device" else o.dtype.replace("torch.", "")
        if o.kind == "tensor" and value:
            places.setdefault(value, []).append(f"`{o.expr}`")
    if isinstance(node, ast.Call):
        module = ev.value_of(node.func)
        if is_module(module):
            for value in _module_values(module, what):
                places.setdefault(value, []).append(f"`{ast.unparse(node.func)}`'s parameters")
    if len(places) < 2:
        return ""
    where = "on " if what == "device" else ""
    said = " but ".join(f"{' and '.join(names)} {'are' if len(names) > 1 or 'parameters' in names[0] else 'is'} "
                        f"{where}{value}" for value, names in list(places.items())[:3])
    return f"{said}: {FIX[what]}"


def _integer_hint(operands: list[Operand], ids: bool) -> str:
    """A float tensor where integers are wanted: an Embedding's ids (``ids``), else a loss's class targets."""
    floats = [o for o in operands if o.kind == "tensor" and ("float" in o.dtype or "half" in o.dtype)]
    if not floats:
        return ""
    wrong = floats[-1]  # (the target comes after the scores; an Embedding's ids are its only float tensor)
    dtype = wrong.dtype.replace("torch.", "")
    if ids:
        return f"`{wrong.expr}` is {dtype}, but an Embedding's ids must be integers (`{wrong.expr}.long()`)"
    return (f"`{wrong.expr}` is {dtype}, but class indices must be integers (`{wrong.expr}.long()`); a float "
            "target must be class probabilities of the scores' shape")


def _module_values(module: Any, what: str) -> list[str]:
    """The devices (or dtypes) of a module's parameters and buffers, in the order first seen."""
    found: list[str] = []
    for _, t, kind in named_tensors(module, limit=MODULE_TENSORS):
        if what == "dtype" and kind != "param":  # (a buffer of counts is int64 by design)
            continue
        value = str(t.device) if what == "device" else str(t.dtype).replace("torch.", "")
        if value not in found:
            found.append(value)
    return found
