"""Errors where a value breaks an op's contract, named with the operand that broke it: binary cross-entropy handed
scores that are not probabilities (``all elements of input should be between 0 and 1``), a parameter changed in
place while autograd records (``a leaf Variable that requires grad is being used in an in-place operation``), and a
tensor of many values where Python wants one truth value (``Boolean value of Tensor with more than one value is
ambiguous``), ``.item()`` of many values, and a feature map pooled or convolved below its kernel ("Output size is
too small"). torch says which rule broke, never which tensor, nor the usual fix."""

from __future__ import annotations

import ast
import math
from typing import Any

from ...format import fmt_shape
from . import static
from .evaluator import Evaluator
from .ranges import value_range
from .source import call_arguments
from .static import is_tensor


def contract_hint(ev: Evaluator, node: ast.AST, kind: str, message: str = "") -> str:
    """The hint for the families ``probabilities``, ``leaf in place``, ``ambiguous``, ``one value`` and ``too small``;
    '' when not found."""
    hint = {"probabilities": _probabilities, "leaf in place": _leaf, "ambiguous": _ambiguous, "one value": _one_value,
            "too small": _too_small}.get(kind)
    try:
        return hint(ev, node, message) if hint is not None else ""
    except Exception:  # noqa: BLE001 - a tensor whose metadata is its subclass's code: no hint, the rest stands
        return ""


def _tensors(ev: Evaluator, nodes: list[ast.AST]) -> list[tuple[ast.AST, Any]]:
    return [(n, v) for n, v in ((n, ev.value_of(n)) for n in nodes) if is_tensor(v)]


def _probabilities(ev: Evaluator, node: ast.AST, message: str) -> str:
    """binary_cross_entropy / BCELoss on values outside [0, 1]: scores where probabilities belong (the usual case),
    a NaN, or targets that are not 0/1 (torch's message says which of input and target)."""
    tensors = _tensors(ev, call_arguments(node))[:2]
    targets = "of target" in message
    if targets:
        tensors = tensors[1:]
    for arg, t in tensors[:1]:
        extent = value_range(t)
        if extent is None:
            continue
        low, high, nans = extent
        if nans < 0:
            continue
        text = f"`{ast.unparse(arg)}` {fmt_shape(tuple(static.tensor_attribute(t, 'shape')))}"
        if nans:
            return (f"{text} holds {nans:,} NaN (NaN fails the [0, 1] check): it went non-finite before the loss; "
                    "`tensor-dap run --break-on-nan` stops where it was born")
        if targets and (low < 0 or high > 1):
            return (f"{text} holds {low:.4g}…{high:.4g}, but binary cross-entropy's targets must be in [0, 1]: class "
                    "ids of more than two classes belong to cross_entropy; labels of -1/1 map to 0/1 with (y + 1) / 2")
        if low < 0 or high > 1:
            return (f"{text} holds {low:.4g}…{high:.4g}, not probabilities: binary cross-entropy takes values in "
                    "[0, 1]. For raw scores (logits) use nn.BCEWithLogitsLoss() / F.binary_cross_entropy_with_logits, "
                    "which applies the sigmoid itself and stays finite where log(sigmoid) would not; or apply "
                    "torch.sigmoid first")
    return ""


_INIT = {"normal_": "normal_", "uniform_": "uniform_", "zero_": "zeros_", "fill_": "constant_"}  # Tensor's -> nn.init's


def _leaf(ev: Evaluator, node: ast.AST, message: str) -> str:
    """A parameter (a leaf that requires grad) changed in place outside ``torch.no_grad()``."""
    candidates: list[ast.AST] = []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        candidates.append(node.func.value)  # w.normal_(...), w.add_(...)
    elif isinstance(node, ast.AugAssign):
        candidates.append(node.target)
    candidates += [n.value for n in ast.walk(node) if isinstance(n, ast.Subscript)]  # w[0] = 0
    candidates += call_arguments(node)  # torch.fill_(w, ...)
    for arg, t in _tensors(ev, candidates):
        if static.tensor_attribute(t, "requires_grad") and static.tensor_attribute(t, "grad_fn") is None:
            text = ast.unparse(arg)
            init = ""
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _INIT:
                args = ", ".join([text, *(ast.unparse(a) for a in node.args)])
                init = f" (`nn.init.{_INIT[node.func.attr]}({args})`)"
            return (f"`{text}` is a leaf that requires grad (a parameter, or a tensor made with requires_grad=True), "
                    "and autograd cannot record an in-place change of it. Change it under `with torch.no_grad():` "
                    f"(initialization, a hand-written update), or with torch.nn.init{init}, which does")
    return ""


def _ambiguous(ev: Evaluator, node: ast.AST, message: str) -> str:
    """``if``/``while``/``and``/``or``/``not``/``assert`` on a tensor of many values."""
    found = _many_values(ev, [node, *(n for n in ast.walk(node) if n is not node)])
    if found is None:
        return ""
    expr, said = found
    text = ast.unparse(expr)
    whole = text if isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else f"({text})"
    return (f"{said}, and `if`/`while`/`assert`/`and`/`or`/`not` need one: write `{whole}.all()` or `{whole}.any()` "
            "for one answer, or `torch.where` / a mask to decide for each element")


def _one_value(ev: Evaluator, node: ast.AST, message: str) -> str:
    """``.item()`` / ``float()`` / ``int()`` of a tensor of many values."""
    nodes = [node.func.value] if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else []
    found = _many_values(ev, nodes + call_arguments(node))
    if found is None:
        return ""
    expr, said = found
    text = ast.unparse(expr)
    return (f"{said}, and .item(), float() and int() take one: reduce it first (`{text}.mean().item()`: a loss with "
            f"reduction='none'?), or read them all with `{text}.tolist()`")


def _many_values(ev: Evaluator, nodes: list[ast.AST]) -> tuple[ast.AST, str] | None:
    """The first of ``nodes`` that is a tensor of more than one value, and "`x` [3] has 3 values"."""
    for expr, t in _tensors(ev, nodes):
        shape = tuple(static.tensor_attribute(t, "shape"))
        if math.prod(shape) > 1:
            return expr, f"`{ast.unparse(expr)}` {fmt_shape(shape)} has {math.prod(shape):,} values"
    return None


def _too_small(ev: Evaluator, node: ast.AST, message: str) -> str:
    """A pool or conv whose window is larger than the feature map left: the input shrank to nothing."""
    callee = ev.value_of(node.func) if isinstance(node, ast.Call) else None
    tensors = [(e, t) for e, t in _tensors(ev, call_arguments(node)) if len(static.tensor_attribute(t, "shape")) >= 3]
    if not tensors:
        return ""
    expr, t = tensors[0]
    shape = tuple(static.tensor_attribute(t, "shape"))
    size = "×".join(str(d) for d in shape[2:])
    fix = ("The input is too small for this many downsamplings (pooling, stride 2): resize the input larger, drop a "
           "downsampling, or end the stack in nn.AdaptiveAvgPool2d")
    kind = type(callee).__name__
    if static.is_module(callee) and not ("Pool" in kind or "Conv" in kind):  # a container: the window is inside it
        return (f"`{ast.unparse(expr)}` {fmt_shape(shape)} enters `{ast.unparse(node.func)}` ({kind}) at {size}, and "
                f"its downsamplings bring it below a kernel (the innermost frame shows where). {fix}")
    at = f" at `{ast.unparse(node.func)}` ({kind})" if static.is_module(callee) else ""
    return (f"`{ast.unparse(expr)}` {fmt_shape(shape)} is {size} where it reaches the window{at}: the feature map "
            f"shrank below the kernel. {fix}")
