"""Per-parameter gradient norms of a module, flagged: the ``grads`` report.

Norms stay on the parameter's device and come back in one transfer per device, so on a
GPU the report costs one synchronization, not one per parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kinds import is_module

VANISHING = 1e-7  # a gradient norm below this (but not 0) carries no useful signal
EXPLODING = 1e3


@dataclass(frozen=True)
class GradRow:
    name: str
    shape: tuple[int, ...]
    norm: float | None  # None: no .grad (or it could not be read)
    flag: str  # "", "no grad", "zero", "vanishing", "exploding", "NaN/Inf", "error"


@dataclass(frozen=True)
class GradReport:
    module: str  # the name the module was found under
    rows: tuple[GradRow, ...]
    total_norm: float | None  # the 2-norm over all gradients, as clip_grad_norm_ computes it
    frozen: int  # parameters with requires_grad=False (not listed)

    def count(self, flag: str) -> int:
        return sum(1 for r in self.rows if r.flag == flag)


def find_module(local_vars: Mapping[str, Any], global_vars: Mapping[str, Any] | None = None) -> tuple[str, Any] | None:
    """The first nn.Module among the locals, then ``self``, then the globals (a script's module-level
    model seen from inside a function), as (name, module)."""
    for name, value in local_vars.items():
        if name != "self" and is_module(value):
            return name, value
    if is_module(local_vars.get("self")):
        return "self", local_vars["self"]
    for name, value in (global_vars or {}).items():
        if not name.startswith("__") and is_module(value):
            return name, value
    return None


def grad_norms(grads: list[Any]) -> list[float | None]:
    """2-norms in float32 or wider, computed on each grad's device; one transfer per device (None: unreadable)."""
    import torch

    out: list[float | None] = [None] * len(grads)
    by_device: dict[str, list[tuple[int, Any]]] = {}
    with torch.no_grad():
        for i, g in enumerate(grads):
            try:
                if g.is_sparse:
                    g = g.coalesce()._values()
                wide = g.dtype in (torch.float16, torch.bfloat16)
                norm = torch.linalg.vector_norm(g, dtype=torch.float32 if wide else None)
                by_device.setdefault(str(norm.device), []).append((i, norm.to(torch.float64)))
            except Exception:
                continue
        for items in by_device.values():
            try:
                values = torch.stack([n for _, n in items]).tolist()
            except Exception:
                continue
            for (i, _), v in zip(items, values):
                out[i] = float(v)
    return out


def _flag(norm: float | None, vanishing: float, exploding: float) -> str:
    if norm is None:
        return "error"
    if not math.isfinite(norm):
        return "NaN/Inf"
    if norm == 0:
        return "zero"
    if norm < vanishing:
        return "vanishing"
    if norm > exploding:
        return "exploding"
    return ""


def grad_report(module: Any, name: str = "model", *, vanishing: float = VANISHING,
                exploding: float = EXPLODING) -> GradReport:
    """Gradient norm and flag of every trainable parameter of ``module``."""
    params = [(n, p) for n, p in module.named_parameters()]
    trainable = [(n, p) for n, p in params if p.requires_grad]
    with_grad = [(n, p) for n, p in trainable if p.grad is not None]
    norms = dict(zip((n for n, _ in with_grad), grad_norms([p.grad for _, p in with_grad])))
    rows = []
    for n, p in trainable:
        shape = tuple(int(d) for d in p.shape)
        if p.grad is None:
            rows.append(GradRow(n, shape, None, "no grad"))
        else:
            rows.append(GradRow(n, shape, norms.get(n), _flag(norms.get(n), vanishing, exploding)))
    known = [r.norm for r in rows if r.norm is not None]
    total = math.sqrt(sum(v * v for v in known)) if known else None
    return GradReport(module=name, rows=tuple(rows), total_norm=total, frozen=len(params) - len(trainable))
