"""Names of ops and autograd nodes as users know them, and the line that created a node.

``op_name(torch.Tensor.__truediv__)`` is ``div``; ``forward_name('SqrtBackward0')`` is ``sqrt``;
a custom ``autograd.Function``'s node ``ClampGradBackward`` comes from ``ClampGrad.apply``.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterator
from itertools import islice
from typing import Any

import torch

from ..debug.frames import SourceLine, is_library
from ..nested import walk

MAX_TENSORS = 64  # tensors looked at in one op's arguments or outputs

_RENAMED = {"truediv": "div", "rtruediv": "div", "itruediv": "div", "floordiv": "floor_divide",
            "rsub": "sub", "isub": "sub", "iadd": "add", "radd": "add", "imul": "mul", "rmul": "mul",
            "rpow": "pow", "ipow": "pow", "rmatmul": "matmul"}


def op_name(func: Any) -> str:
    """'softmax', 'div' (for __truediv__), 'masked_fill_': the name users know an op by."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        name = _RENAMED.get(name, name)
    return name


_INPLACE_DUNDERS = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__", "__imod__",
                    "__imatmul__", "__setitem__"}


def inplace(raw: str) -> bool:
    """``masked_fill_``, ``x += 1``, ``x[i] = v``: ops that change their first argument."""
    return (raw.endswith("_") and not raw.startswith("_")) or raw in _INPLACE_DUNDERS


_RUNNING = ((1, "running_mean"), (2, "running_var"))  # where batch_norm and instance_norm take them


def running_stats(name: str, args: Any, kwargs: Any) -> list[Any]:
    """The running statistics a normalization updates in place while training (``F.batch_norm``'s and
    ``F.instance_norm``'s ``running_mean`` and ``running_var``): buffers written inside the op, by no op of theirs."""
    if name not in ("batch_norm", "instance_norm"):
        return []
    given = [kwargs.get(key, args[i] if len(args) > i else None) for i, key in _RUNNING]
    return [t for t in given if isinstance(t, torch.Tensor)]


def is_node_name(name: str | None) -> bool:
    """Whether ``name`` is an autograd node's ('SqrtBackward0', 'SafeLogBackward'), not an op's ('div')."""
    return name is not None and re.search(r"Backward\d*$", name) is not None


def forward_name(node_name: str) -> str:
    """'SqrtBackward0' -> 'sqrt', 'NativeLayerNormBackward0' -> 'native_layer_norm'; a custom
    ``autograd.Function`` node 'ClampGradBackward' -> 'ClampGrad.apply'."""
    base = node_name.split("::")[-1]
    if base.endswith("Backward") and not base[-9:-8].isdigit():
        return f"{base[:-len('Backward')]}.apply"
    base = re.sub(r"Backward\d*$", "", base)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).lower()


# ops that pick or move values without changing them: a producer is looked for through them (a log of
# ``probs.gather(1, y)`` or of ``probs[range(n), y]`` is a log of the softmax that made ``probs``)
_PICKS = {"gather", "index", "select", "slice", "view", "unsafe_view", "reshape_alias", "squeeze", "unsqueeze",
          "expand", "t", "transpose", "permute", "clone", "index_select", "take_along_dim", "narrow", "split",
          "unbind", "masked_select", "as_strided"}
_HOPS = 16  # nodes walked at most


def producers(node: Any, depth: int = 2) -> tuple[str, ...]:
    """The forward ops of ``node`` and of the nodes that made its first input, ``depth`` in all, nearest first,
    looking through ops that only pick values (``_PICKS``): what the diagnosis reads to tell a log of a sigmoid
    (``("sigmoid",)``, ``("rsub", "sigmoid")`` for ``1 - sigmoid(x)``) from a log of anything else. Empty where
    the graph does not say; never raises."""
    out: list[str] = []
    try:
        for _ in range(_HOPS):
            if node is None or len(out) >= depth or node.name() == "torch::autograd::AccumulateGrad":
                break
            name = forward_name(node.name())
            if name not in _PICKS:
                out.append(name)
            node = first_input(node)
    except Exception:  # noqa: BLE001 - a node of an odd kind: what was read stands
        pass
    return tuple(out)


def graph_nodes(roots: Any, limit: int) -> Iterator[Any]:
    """The autograd nodes behind ``roots``, each once, nearest the roots first, ``limit`` of them at most."""
    todo = deque(r for r in roots if r is not None)
    seen = set(todo)
    while todo and len(seen) <= limit:
        node = todo.popleft()
        yield node
        for child, _ in getattr(node, "next_functions", ()):
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)


def first_input(node: Any) -> Any:
    """The node that made ``node``'s first input (None: a leaf, a constant, or no inputs)."""
    try:
        return node.next_functions[0][0] if node.next_functions else None
    except Exception:  # noqa: BLE001 - as above
        return None


def anomaly_line(node: Any) -> SourceLine | None:
    """The user's line that created ``node``, from the forward stack anomaly mode keeps in its metadata."""
    try:
        stack = node.metadata.get("traceback_")
    except Exception:  # noqa: BLE001 - a node without metadata
        return None
    for entry in reversed(stack or []):
        m = _FRAME.match(entry)
        if m and not is_library(m.group(1)):
            return SourceLine(m.group(1), int(m.group(2)), m.group(3))
    return None


_FRAME = re.compile(r'\s*File "(.*)", line (\d+), in (.*)')


def saved_values(node: Any) -> dict[str, Any]:
    """The values an autograd node saved from its forward for its backward (tensors and numbers: ``SqrtBackward0``
    its ``result``, ``LogBackward0`` its input ``self``), by name without the ``_saved_`` prefix."""
    values = {}
    for attr in dir(node):
        if attr.startswith("_saved_"):
            try:
                values[attr[len("_saved_"):]] = getattr(node, attr)
            except Exception:  # noqa: BLE001 - freed already, or not readable: as if not saved
                continue
    return values


def next_sequence_nr() -> int:
    """The number autograd gives the next node made on this thread (-1 where torch cannot say)."""
    import torch

    try:
        return int(torch._C._autograd._get_sequence_nr())
    except Exception:  # noqa: BLE001 - a private call: another torch may lack it
        return -1


def sequence_nr(node: Any) -> int:
    """When autograd made ``node``, in this thread: later nodes have larger numbers."""
    try:
        return int(node._sequence_nr())
    except Exception:  # noqa: BLE001 - a node type without one: walked, never a boundary
        return 1 << 62


def op_tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs (nested up to 4 deep), ``MAX_TENSORS`` of them at most."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    return [t for _, t in islice(walk(obj, max_depth=4), MAX_TENSORS)]


def scalar_kind(args: Any, kwargs: Any) -> str | None:
    """A non-finite Python number among the arguments (``masked_fill(m, float('-inf'))``)."""
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, float) and not math.isfinite(value):
            return "nan" if math.isnan(value) else "inf"
    return None
