"""Which line changed in place a tensor that ``backward()`` needs, when it is an activation, not a parameter.

torch's error names only the node that made the tensor, its shape and two version numbers
(``[torch.FloatTensor [64, 32]], which is output 0 of Sigmoid, is at version 1; expected version 0``);
anomaly mode then points at the op that saved it, never at what changed it. Re-running the step's forward under a
``TorchFunctionMode`` that reads the version counter of every tensor an op is handed finds the op that moved it
from the expected version: ``nn.ReLU(inplace=True)`` after a sigmoid, ``x += y``, ``x[:, 0] = 0``, ``masked_fill_``.
Only the failing step's re-run pays for it (the program is crashing anyway).
"""

from __future__ import annotations

import contextlib
import re
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode

from ..debug import torch_errors
from ..debug.frames import SourceLine, call_site, site_line
from ..format import parse_shape
from . import as_called
from .ops import op_tensors

_NODE = re.compile(r"which is output \d+ of (\w+),")
_SHAPE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\]")
_VERSION = re.compile(r"is at version (\d+); expected version (\d+)")
_SUFFIX = re.compile(r"Backward\d*$")
# nodes of ops that only view their input: what torch names when it saved a parameter's transpose ("output 0 of
# TBackward0", "of AsStrided")
_VIEWS = {"T", "AsStrided", "View", "UnsafeView", "Permute", "Transpose", "Expand", "Select", "Slice", "Unsqueeze",
          "Squeeze", "Alias", "Reshape", "ReshapeAlias", "Narrow", "Diagonal", "Unbind", "Split", "SplitWithSizes",
          "Unfold", "ViewAsReal", "ViewAsComplex", "Detach"}
MADE_MAX = 200_000  # tensors whose making op is remembered in one re-run, at most
_SPELLED = {"__iadd__": "+=", "__isub__": "-=", "__imul__": "*=", "__itruediv__": "/=", "__ifloordiv__": "//=",
            "__ipow__": "**=", "__iand__": "&=", "__ior__": "|=", "__setitem__": "an assignment `[...] =`"}
_ARITHMETIC = {"add_": "+", "sub_": "-", "mul_": "*", "div_": "/"}


@dataclass(frozen=True)
class Wanted:
    """The saved tensor torch's error is about: the node that made it (None for a leaf), its shape and versions."""

    node: str | None
    shape: tuple[int, ...]
    expected: int
    now: int

    @property
    def made_by_view_or_leaf(self) -> bool:
        """Whether the tensor may be a parameter (or its transpose): no node, or a node that only views."""
        return self.node is None or _op_of(self.node) in _VIEWS

    @classmethod
    def parse(cls, text: str) -> Wanted | None:
        shape, version = _SHAPE.search(text), _VERSION.search(text)
        if torch_errors.INPLACE not in text or shape is None or version is None:
            return None
        node = _NODE.search(text)
        size = parse_shape(shape.group(1))
        return cls(node.group(1) if node else None, size, int(version.group(2)), int(version.group(1)))


@dataclass(frozen=True)
class Mutation:
    """The op that changed the saved tensor in place, and the op that made it (lines of the user's code)."""

    op: str  # as the user wrote it: "relu (inplace=True)", "+=", "masked_fill_"
    line: SourceLine | None
    made_by: str | None  # the op that made the tensor, when it ran in the re-run
    made_at: SourceLine | None
    module: str | None = None  # the innermost module running the change: "blocks.0.act (ReLU)"
    made_in: str | None = None  # the innermost module running the op that made the tensor

    @property
    def fix(self) -> str:
        """The out-of-place way to write it."""
        op = self.op
        if op.endswith("(inplace=True)"):
            return f"call {op.split()[0]} without inplace=True (nn.ReLU() rather than nn.ReLU(inplace=True))"
        if op in _ARITHMETIC:
            sign = _ARITHMETIC[op]
            return f"write `x = x {sign} y` rather than `x {sign}= y` or `x.{op}(y)`"
        if op in _SPELLED.values() and op.endswith("="):
            return f"write `x = x {op[:-1]} y` rather than `x {op} y`"
        if op == _SPELLED["__setitem__"]:
            return "assign into a copy (`x = x.clone()` first) or build the tensor with torch.where"
        if op.endswith("_") and hasattr(torch.Tensor, op[:-1]):
            return f"use {op[:-1]} and keep its result (`x = x.{op[:-1]}(...)`), which leaves the tensor as it was"
        return "change a copy of it (`x = x.clone()` first)"


class _Watcher(TorchFunctionMode):
    """Every op's tensor arguments: their version before and after; the first whose version moves from the wanted
    one, made by the wanted node, is the mutation. Ops' outputs are remembered (weakly) with their line."""

    def __init__(self, wanted: Wanted) -> None:
        super().__init__()
        self.wanted = wanted
        self.found: Mutation | None = None
        self._made: dict[int, tuple[Any, str, Any, str | None]] = {}
        self.modules: list[str] = []  # the modules running now, innermost last (``_module_stack``)

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.found is not None:
            return as_called.call(func, args, kwargs)
        before = [(t, t._version, t.grad_fn, t._base, _node_of(t._base)) for t in op_tensors((args, kwargs))]
        result = as_called.call(func, args, kwargs)
        for t, version, node, base, base_node in before:
            # a tensor made in the re-run starts at version 0 as in the step; an input (a copy) is any version
            if t._version != version and (version == self.wanted.expected or self.wanted.node is None):
                self._check(func, kwargs, ((t, node), (base, base_node)))
        made = [t for t in op_tensors(result) if t.grad_fn is not None]  # (an LSTM's output is in a tuple)
        if made and len(self._made) < MADE_MAX:
            entry = (_name(func), call_site(sys._getframe(1)), self._module())
            for t in made:
                self._made[id(t)] = (weakref.ref(t), *entry)
        return result

    def _check(self, func: Any, kwargs: dict[str, Any], candidates: tuple[tuple[Any, Any], ...]) -> None:
        """``candidates``: the changed tensor and its view's base, each with the node that made it (before)."""
        w = self.wanted
        for candidate, made_by in candidates:
            if candidate is None or tuple(candidate.shape) not in (w.shape, w.shape[::-1]):
                continue
            if w.node is None:
                if made_by is not None or isinstance(candidate, torch.nn.Parameter):
                    continue
            elif made_by is None or _op_of(type(made_by).__name__) != _op_of(w.node):
                continue
            entry = self._made.get(id(candidate))
            maker = entry if entry is not None and entry[0]() is candidate else None
            self.found = Mutation(_spelled(func, kwargs), site_line(call_site(sys._getframe(2))),
                                  maker[1] if maker else None, site_line(maker[2]) if maker else None,
                                  self._module(), maker[3] if maker else None)
            return

    def _module(self) -> str | None:
        return next((m for m in reversed(self.modules) if m), None)  # ("": the root, or not of the model)


def _node_of(t: torch.Tensor | None) -> Any:
    return t.grad_fn if t is not None else None


def _op_of(node: str) -> str:
    """torch names a saved output's node without its suffix ("output 0 of Sigmoid" for SigmoidBackward0)."""
    return _SUFFIX.sub("", node)


def _name(func: Any) -> str:
    return getattr(func, "__name__", None) or str(func)


def _spelled(func: Any, kwargs: dict[str, Any]) -> str:
    name = _name(func)
    if name in _SPELLED:
        return _SPELLED[name]
    if kwargs.get("out") is not None:
        return f"{name}(out=...)"
    if not name.endswith("_"):  # F.relu(x, inplace=True), F.dropout(..., inplace=True)
        return f"{name} (inplace=True)"
    return name


def find(run: Callable[[], Any], wanted: Wanted, model: torch.nn.Module) -> Mutation | None:
    """Run ``run`` (the step's forward of ``model``, re-run) watching for the mutation; None when it made none."""
    watcher = _Watcher(wanted)
    with torch.enable_grad(), _module_stack(model, watcher.modules), watcher:
        run()
    return watcher.found


@contextlib.contextmanager
def _module_stack(model: torch.nn.Module, stack: list[str]) -> Iterator[None]:
    """``stack`` holds the modules of ``model`` running, named as the NaN reports name them, while inside."""
    # the root is left unnamed: the line named is in it
    names = {id(m): f"{name} ({type(m).__name__})" if name else "" for name, m in model.named_modules()}

    def entered(module: torch.nn.Module, *_: Any) -> None:
        name = names.get(id(module))
        stack.append(name or "")

    def left(module: torch.nn.Module, *_: Any) -> None:
        if stack:
            stack.pop()

    handles = [register_module_forward_pre_hook(entered), register_module_forward_hook(left, always_call=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
