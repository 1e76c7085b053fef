"""Operands on different devices: ``Expected all tensors to be on the same device, but found at least two devices,
cuda:0 and cpu!`` names two devices, not which operand is on which: the hint does, a module by its parameters'."""

from __future__ import annotations

import ast
from typing import Any

from ...summary.modules import named_tensors
from .evaluator import Evaluator
from .model import Operand
from .static import is_module

MODULE_TENSORS = 10_000  # of a module's parameters and buffers looked at for their devices, at most


def device_hint(ev: Evaluator, node: ast.AST, operands: list[Operand]) -> str:
    """"`x` is on cuda:0 but `model`'s parameters are on cpu: ..."; '' when the operands show one device."""
    places: dict[str, list[str]] = {}
    for o in operands:
        if o.kind == "tensor" and o.device:
            places.setdefault(o.device, []).append(f"`{o.expr}`")
    if isinstance(node, ast.Call):
        module = ev.value_of(node.func)
        if is_module(module):
            for device in _module_devices(module):
                places.setdefault(device, []).append(f"`{ast.unparse(node.func)}`'s parameters")
    if len(places) < 2:
        return ""
    said = " but ".join(f"{' and '.join(names)} {'are' if len(names) > 1 or 'parameters' in names[0] else 'is'} "
                        f"on {device}" for device, names in list(places.items())[:3])
    return (f"{said}: put the model and each batch on one device (`model.to(device)` once, `x = x.to(device)` "
            "for each batch, and tensors made in forward with `device=x.device`)")


def _module_devices(module: Any) -> list[str]:
    """The devices of a module's parameters and buffers, in the order first seen."""
    devices: list[str] = []
    for _, t, _ in named_tensors(module, limit=MODULE_TENSORS):
        device = str(t.device)
        if device not in devices:
            devices.append(device)
    return devices
