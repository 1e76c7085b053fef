"""Why ``backward()`` says "Trying to backward through the graph a second time": which input still carries a graph
an earlier ``backward()`` freed.

torch suggests ``retain_graph=True``, which is rarely the fix: the usual cause is a tensor that carries its graph
into a later loss, an RNN's hidden state kept from the last batch without ``detach()`` (every step's graph then
chains to the previous one), or a GAN's generated batch fed to the discriminator's loss without ``detach()``
(whose ``backward()`` frees the generator's graph before the generator's own loss reaches it). While ``watch``
listens, the inputs of this step's forwards that have a graph (a ``grad_fn``) are looked at: one whose graph holds
a node whose saved tensors are gone is named, by the name the program's frame has for it, with the line that
handed it to the model. When none does, the failing loss's own graph is: the same loss handed to backward() a
second time, or two losses sharing a trunk (a multi-task model) each handed to its own backward(), whose first
frees the shared part; the other loss is named when the program's frame holds it.
"""

from __future__ import annotations

import ast
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch

from ..debug.frames import SourceLine, held_as, user_frame
from ..nested import walk
from .ops import graph_nodes

NODES = 5000  # of each carrier's graph, nearest the carrier first
BUDGET_S = 0.25  # for the whole search


def explain(inputs: list[tuple[Any, SourceLine | None]], loss: Any = None, previous: Any = None) -> str | None:
    """``inputs``: (a forward's arguments, the line that called the model) of this step; ``loss``: the tensor
    handed to the failing backward(); ``previous``: the loss the last backward() that returned went through. The
    note, or None."""
    deadline = time.monotonic() + BUDGET_S
    before = _made_before(previous)
    for args, line in inputs:
        for path, t in walk(args, limit=256):
            if isinstance(t, torch.Tensor) and t.grad_fn is not None and _freed(t.grad_fn, deadline, before):
                return _said(t, path, line)
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return None
    if previous is loss:
        return _again(loss)
    for name, other in _losses_beside(loss, previous):
        node = _shared_node(loss, other, deadline)
        if node is not None:
            return _shared(loss, name, node)
    return None


def _freed(root: Any, deadline: float, before: int | None = None) -> bool:
    """Whether the graph behind ``root`` holds a node whose saved tensors a backward() already freed, made before
    node number ``before`` (None: any): the failing backward() frees what it runs before it fails, so an input made
    in this step (a batch embedded outside the model) shows spent nodes too; only nodes that existed when the last
    backward() that returned began can be what it freed."""
    return any((before is None or node._sequence_nr() <= before) and _spent(node)
               for node in _nodes([root], deadline))


def _made_before(previous: Any) -> int | None:
    """The node number of the last loss backward() went through (autograd numbers nodes as it makes them)."""
    try:
        return previous.grad_fn._sequence_nr() if isinstance(previous, torch.Tensor) else None
    except Exception:  # noqa: BLE001 - no graph (a leaf loss), or a node of another make: any node counts
        return None


def _nodes(roots: list[Any], deadline: float) -> Iterator[Any]:
    for node in graph_nodes(roots, NODES):
        if time.monotonic() > deadline:
            return
        yield node


def _spent(node: Any) -> bool:
    """Whether a backward() freed what ``node`` saved."""
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


def _losses_beside(loss: torch.Tensor, previous: Any) -> Iterator[tuple[str | None, torch.Tensor]]:
    """Other one-value tensors with a graph: the last loss backward() went through, then the program's variables."""
    if isinstance(previous, torch.Tensor) and previous.grad_fn is not None:
        yield _name_of(previous), previous
    frame = user_frame(sys._getframe(1))
    while frame is not None:
        for key, value in list(frame.f_locals.items()):
            if (isinstance(value, torch.Tensor) and value is not loss and value is not previous
                    and value.grad_fn is not None and value.numel() == 1 and not key.startswith("_")):
                yield f"`{key}`", value
        frame = user_frame(frame.f_back)


def _shared_node(loss: torch.Tensor, other: torch.Tensor, deadline: float) -> Any:
    """The node nearest ``loss`` that ``other``'s graph holds too, where a backward() freed what it saved: the part
    of the graph an earlier backward() through ``other`` freed (the failing one freed what it ran before it)."""
    theirs = set(_nodes([other.grad_fn], deadline))
    return next((node for node in _nodes([loss.grad_fn], deadline) if node in theirs and _spent(node)), None)


def _again(loss: torch.Tensor) -> str:
    name = _name_of(loss)
    plain = name.split("`")[1] if name else "loss"
    return (f"{name or 'this loss'} was already handed to backward(), which freed its graph: a loss goes to "
            f"backward() once. To log it, read `{plain}.item()`; a loss computed once before the loop must be "
            "computed again in each step. retain_graph=True would let the second backward() run and add the same "
            "gradients twice")


def _shared(loss: torch.Tensor, other: str | None, node: Any) -> str:
    name = _name_of(loss)
    both = (f"`({other.split('`')[1]} + {name.split('`')[1]}).backward()`" if other and name
            else "`(loss_a + loss_b).backward()`")
    earlier = f"{other}, and the backward() of {other} before it" if other else "a loss whose earlier backward()"
    return (f"{name or 'this loss'} shares part of its graph (from {node.name()} down) with {earlier} freed that "
            "part. Add the losses and call backward() once: "
            f"{both} gives each parameter the sum of both gradients, as two backward() calls would; or pass "
            "retain_graph=True to the earlier backward() only")


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
