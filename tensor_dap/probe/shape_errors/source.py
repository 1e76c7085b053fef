"""Find the failing statement and operation in the source: AST, positions, and whose file it is."""

from __future__ import annotations

import ast
from typing import Any


_TREES: dict[tuple[str, int], ast.Module | None] = {}  # keyed by the source too: files change


def tree_of(filename: str, source: str) -> ast.Module | None:
    key = (filename, hash(source))
    if key not in _TREES:
        try:
            _TREES[key] = ast.parse(source)
        except (SyntaxError, ValueError):
            _TREES[key] = None
    return _TREES[key]


def statement_at(tree: ast.Module, lineno: int) -> ast.stmt | None:
    """The innermost statement whose lines contain ``lineno``."""
    best = None
    for node in ast.walk(tree):
        contains = isinstance(node, ast.stmt) and node.lineno <= lineno <= (node.end_lineno or node.lineno)
        if contains and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def position_of(tb: Any) -> tuple[int, int, int, int] | None:
    """(line, end line, col, end col) of the instruction that raised (Python 3.11+)."""
    code = tb.tb_frame.f_code
    if not hasattr(code, "co_positions"):
        return None
    try:
        pos = list(code.co_positions())[tb.tb_lasti // 2]
    except (IndexError, ValueError):
        return None
    return pos if all(p is not None for p in pos) else None


def header_exprs(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates itself (a compound statement's header, not its body)."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [t for t in targets if isinstance(t, ast.Subscript)] + ([stmt.value] if stmt.value else [])
    if isinstance(stmt, ast.AugAssign):
        return [stmt.target, stmt.value]
    if isinstance(stmt, (ast.Expr, ast.Return)):
        return [stmt.value] if stmt.value is not None else []
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Assert):
        return [stmt.test]
    return []


def source_text(source: str, stmt: ast.stmt, lineno: int) -> str:
    if header_exprs(stmt) and not hasattr(stmt, "body"):
        text = ast.get_source_segment(source, stmt) or ""
    else:
        text = ""
    if not text:
        lines = source.splitlines()
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    lines = text.splitlines()
    return "\n".join(lines[:3]) + (" …" if len(lines) > 3 else "")


def find_node(stmt: ast.stmt, pos: tuple[int, int, int, int]) -> ast.AST | None:
    for node in ast.walk(stmt):
        if isinstance(node, (ast.BinOp, ast.Call, ast.Subscript, ast.UnaryOp, ast.AugAssign, ast.Compare, ast.BoolOp,
                             ast.Name)) \
                and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == pos:
            return node
    return None


def callee_name(func: ast.AST) -> str:
    """The name a call is made by: ``cross_entropy`` in ``F.cross_entropy(...)``, ``relu`` in ``relu(...)``; '' for
    anything else (``model.layers[0](...)``)."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def call_arguments(node: ast.AST) -> list[ast.AST]:
    """A call's argument expressions, positional then keyword ([] for anything but a call)."""
    return [*node.args, *(k.value for k in node.keywords)] if isinstance(node, ast.Call) else []
