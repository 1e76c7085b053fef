"""Explain a shape error: which operands of the failing line have which shapes.

Like tensor-sensor, the failing line's AST is re-evaluated piece by piece, but safely
(``evaluator``); the operation that fails on meta tensors, or the one the interpreter was
executing (Python 3.11+ instruction positions, ``source``), is the culprit; its operands and
their shapes, with one hint (``hints``), are the explanation.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

from ...format import plain_repr, short_error
from ...summary.modules import describe_module
from ...summary.tensor import no_torch_function
from . import static
from .evaluator import Evaluator, device_text
from .collate import collate_hint
from .hints import mismatch_hint
from .model import FrameExplanation, Operand, ShapeExplanation, classify
from .static import is_module, is_tensor
from ...libraries import is_user_file
from .source import call_arguments, find_node, header_exprs, position_of, source_text, statement_at, tree_of

_VALUE_CHARS = 80  # of an operand's value text

def _operand_nodes(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """(callee-side nodes, argument nodes) of an operation."""
    if isinstance(node, ast.BinOp):
        return [], [node.left, node.right]
    if isinstance(node, ast.AugAssign):
        return [], [node.target, node.value]
    if isinstance(node, ast.UnaryOp):
        return [], [node.operand]
    if isinstance(node, ast.Compare):
        return [], [node.left, *node.comparators]
    if isinstance(node, ast.BoolOp):
        return [], list(node.values)
    if isinstance(node, ast.Name):  # `if mask:`
        return [], [node]
    if isinstance(node, ast.Subscript):
        return [node.value], [node.slice]
    if isinstance(node, ast.Call):
        # x in x.view(...) is a tensor operand; self.fc in self.fc(h) is the module called
        callee = [node.func.value, node.func] if isinstance(node.func, ast.Attribute) else [node.func]
        args: list[ast.AST] = []
        for a in call_arguments(node):
            args += a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a]  # torch.cat([a, b])
        return callee, args
    return [], []


def _operand(ev: Evaluator, node: ast.AST) -> Operand:
    text = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
    key = id(node)
    if key not in ev.values:
        return Operand(text, "unknown")
    value, device = ev.values[key]
    if is_tensor(value):
        try:  # torch's getters: a subclass's Python shape property does not run
            shape, dtype = static.tensor_attribute(value, "shape"), static.tensor_attribute(value, "dtype")
        except AttributeError:
            return Operand(text, "unknown")
        return Operand(text, "tensor", tuple(int(d) for d in shape), str(dtype), device or device_text(value))
    if is_module(value):
        return Operand(text, "module", detail=_module_text(value))
    return Operand(text, "value", detail=_value_text(value))


def _module_text(module: Any) -> str:
    """``Linear(4→5)``, or ``Sequential(3) (124 parameters)`` for a container: from torch's own data, no user code."""
    summary = describe_module(module, max_ms=50.0)
    if summary.children == 0 and summary.signature != summary.kind:
        return summary.signature  # a layer: its constructor-like name says it all
    return f"{summary.signature} ({summary.params:,}{'' if summary.complete else '+'} parameters)"


def _value_text(value: Any) -> str:
    """A plain value by its repr; any other object by its type (its __repr__ is user code)."""
    text = plain_repr(value, _VALUE_CHARS)
    return f"<{type(value).__name__}>" if text is None else text


def explain_frame(tb: Any, kind: str = "", message: str = "") -> FrameExplanation | None:
    """The failing operation of one traceback entry and its operands; None without source.

    ``kind`` (from ``classify``) and the error ``message`` pick the hint when the operation alone cannot.
    """
    frame = tb.tb_frame
    filename, lineno = frame.f_code.co_filename, tb.tb_lineno
    lines = linecache.getlines(filename, frame.f_globals)
    if not lines:
        return None
    source = "".join(lines)
    tree = tree_of(filename, source)
    stmt = statement_at(tree, lineno) if tree is not None else None
    if stmt is None:
        return None
    ev = Evaluator(frame)
    for expr in header_exprs(stmt):
        ev.run(expr)
    pos = position_of(tb)
    node = find_node(stmt, pos) if pos else None
    if node is None and isinstance(stmt, ast.AugAssign) and pos and pos[0] == stmt.lineno:
        node = stmt
    if node is None and isinstance(stmt, (ast.If, ast.While, ast.Assert)) and pos and pos[::2] == (stmt.lineno,
                                                                                                     stmt.col_offset):
        node = stmt.test  # the statement's own truth test failed (a tensor of many values)
    if node is None and ev.failed is not None:
        node = ev.failed.node
    if node is None:  # fall back to the outermost call of the statement (e.g. a module's forward)
        node = next((n for e in header_exprs(stmt) for n in ast.walk(e) if isinstance(n, ast.Call)), None)
    if node is not None:
        ev.run(node)  # AugAssign and targets are not evaluated on their own
        callee, args = _operand_nodes(node)
        for n in (*callee, *args):
            ev.run(n)  # each operand, even one a short circuit (``a and b``) or a failure left out
        operands = [o for o in (_operand(ev, n) for n in callee) if o.kind in ("tensor", "module")]
        operands += [o for o in (_operand(ev, n) for n in args) if o.kind in ("tensor", "module", "unknown")]
        expr = ast.unparse(node) if not isinstance(node, ast.AugAssign) else source_text(source, stmt, lineno)
    else:
        operands, expr = [], ""
    return FrameExplanation(
        filename=filename, lineno=lineno, function=frame.f_code.co_name,
        source=source_text(source, stmt, lineno), expr=expr if node is not None else "",
        operands=tuple(operands), hint=mismatch_hint(ev, node, operands, kind, message) if node is not None else
        collate_hint(message) if kind == "collate" else "",
    )


def _entries(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def explain(exc: BaseException, tb: Any = None) -> ShapeExplanation | None:
    """Explain ``exc`` if it is a shape error: the innermost frame with tensor operands, and the
    innermost frame of the user's own code when that is a different one. No tensor subclass's
    ``__torch_function__`` runs meanwhile."""
    with no_torch_function():
        return _explain(exc, tb)


def _explain(exc: BaseException, tb: Any) -> ShapeExplanation | None:
    kind = classify(exc)
    if kind is None:
        return None
    entries = _entries(tb if tb is not None else exc.__traceback__)
    chosen: list[FrameExplanation] = []
    for entry in reversed(entries):
        try:
            fe = explain_frame(entry, kind, str(exc))
        except Exception:
            continue
        if fe is not None and any(o.kind == "tensor" for o in fe.operands):
            chosen.append(fe)
            break
    user = next((e for e in reversed(entries) if is_user_file(e.tb_frame.f_code.co_filename)), None)
    if user is not None and not any(fe.filename == user.tb_frame.f_code.co_filename and
                                    fe.lineno == user.tb_lineno for fe in chosen):
        try:
            fe = explain_frame(user, kind, str(exc))
        except Exception:
            fe = None
        if fe is not None:
            chosen.append(fe)
    return ShapeExplanation(kind=kind, error=short_error(exc, limit=None), frames=tuple(chosen))
