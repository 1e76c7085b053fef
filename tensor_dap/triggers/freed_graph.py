"""Why ``backward()`` says "Trying to backward through the graph a second time": which input still carries a graph
an earlier ``backward()`` freed.

torch suggests ``retain_graph=True``, which is rarely the fix: the usual cause is a tensor that carries its graph
into a later loss, an RNN's hidden state kept from the last batch without ``detach()`` (every step's graph then
chains to the previous one), or a GAN's generated batch fed to the discriminator's loss without ``detach()``
(whose ``backward()`` frees the generator's graph before the generator's own loss reaches it). While ``watch``
listens, the inputs of this step's forwards that have a graph (a ``grad_fn``) are looked at: one whose graph holds
a node whose saved tensors are gone is named, by the name the program's frame has for it, with the line that
handed it to the model.
"""

from __future__ import annotations

import ast
import re
import sys
import time
from typing import Any

import torch

from ..debug.frames import SourceLine, held_as
from ..nested import walk
from .ops import graph_nodes

NODES = 5000  # of each carrier's graph, nearest the carrier first
BUDGET_S = 0.25  # for the whole search


def explain(inputs: list[tuple[Any, SourceLine | None]]) -> str | None:
    """``inputs``: (a forward's arguments, the line that called the model) of this step; the note, or None."""
    deadline = time.monotonic() + BUDGET_S
    for args, line in inputs:
        for path, t in walk(args, limit=256):
            if isinstance(t, torch.Tensor) and t.grad_fn is not None and _freed(t.grad_fn, deadline):
                return _said(t, path, line)
    return None


def _freed(root: Any, deadline: float) -> bool:
    """Whether the graph behind ``root`` holds a node whose saved tensors a backward() already freed."""
    for node in graph_nodes([root], NODES):
        if time.monotonic() > deadline:
            return False
        for name in dir(node):
            if name.startswith("_saved_") and not name.endswith("_raw"):
                try:
                    getattr(node, name)
                except RuntimeError as exc:
                    if "freed" in str(exc) or "second time" in str(exc):
                        return True
                except Exception:  # noqa: BLE001 - an attribute torch cannot give back: not a sign of anything
                    pass
    return False


def _said(t: torch.Tensor, path: str, line: SourceLine | None) -> str:
    name = _name_of(t) or _argument(path, line) or (f"the model's input {path}" if path else "an input of the model")
    handed = f", handed to the model at {line} (`{line.code}`)" if line is not None and line.code else ""
    return (f"{name} {list(t.shape)}{handed} still carries the graph that computed it, and an earlier backward() "
            "already went through that graph and freed it. If it is state kept from an earlier step (an RNN's "
            "hidden state), detach it where it is carried over (`hidden = hidden.detach()`, each tensor of a tuple); "
            "if an earlier loss should not have reached it (a GAN's discriminator step), detach it there "
            "(`netD(fake.detach())`). retain_graph=True would keep every earlier step's graph alive instead")


def _name_of(t: torch.Tensor) -> str | None:
    """The name the program's frames have for ``t`` (or the tuple holding it: an LSTM's ``hidden``), innermost
    first."""
    for name, within in held_as(t, sys._getframe(1), outward=True):
        return f"`{name}`" if within is None else f"`{name}` (a {type(within).__name__} of {len(within)})"
    return None


_INDEX = re.compile(r"\[(\d+|'[^']*')\]")


def _argument(path: str, line: SourceLine | None) -> str | None:
    """The argument as the call wrote it (`hidden` in ``out, hidden = model(x, hidden)``, which the same line then
    rebinds), from ``walk``'s path into (args, kwargs): ``[0][1][0]`` is item 0 of the second positional one."""
    keys = _INDEX.findall(path)
    if line is None or len(keys) < 2 or not line.code:
        return None
    try:
        call = next(n for n in ast.walk(ast.parse(line.code)) if isinstance(n, ast.Call))
    except (SyntaxError, StopIteration, ValueError):
        return None
    if keys[0] == "0" and keys[1].isdigit() and int(keys[1]) < len(call.args):
        node: ast.AST | None = call.args[int(keys[1])]
    else:
        node = next((k.value for k in call.keywords if f"'{k.arg}'" == keys[1]), None)
    text = ast.get_source_segment(line.code, node) if node is not None else None
    if not text:
        return None
    inner = "".join(f"[{k}]" for k in keys[2:])
    return f"`{text}`" + (f" (its item {inner})" if inner else "")
