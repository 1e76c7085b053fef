"""The functions a Python source defines, by dotted name (``f``, ``Class.method``, ``outer.inner``): what
``--function`` looks names up in and what memory sites name their lines by. One walk for both."""

from __future__ import annotations

import ast
from functools import lru_cache


def dotted_defs(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(dotted name, node) of every function in ``tree``, under ``if``/``try`` blocks too; a class only adds to
    its methods' names."""
    out: list[tuple[str, ast.AST]] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((name, child))
                stack.append((child, name + "."))
            else:
                stack.append((child, prefix))
    return out


@lru_cache(maxsize=256)
def functions_of(file: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, dotted name) of every function in ``file``; empty if it cannot be read."""
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read(), file)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    return tuple((node.lineno, getattr(node, "end_lineno", None) or node.lineno, name)  # type: ignore[attr-defined]
                 for name, node in dotted_defs(tree))
