"""The op in the loss computation that made a non-finite loss, read from the loss's autograd graph.

The unchanged loop re-runs the model, never the loss function: code between ``model(x)`` and
``loss.backward()`` that nobody handed to tensor_dap. Its graph still exists when ``backward()``
is called, though, with the tensors each node saved for its backward (``LogBackward0`` keeps the
input of ``log``, ``SqrtBackward0`` its result). When the loss handed to ``backward()`` is
non-finite, ``read`` walks that graph (before backward frees what the nodes saved): it tells whether
the loss reaches the model's outputs (in a GAN, not every loss does) and names the earliest node
created after the model's outputs whose saved inputs are finite while its output is not: ``log``
of a tensor holding an exact 0 (a saturated sigmoid fed to a hand-written BCE), a division by a
zero norm, ``sqrt`` of a negative number.

The output of a node is read where the node saved it (``_saved_result``) or computed again from
its saved inputs for the ops that make NaN/Inf from finite values (the log family, ``sqrt``,
``div``, ``pow``..., and the losses ``mse_loss`` and ``nll_loss``). Ops whose output nothing saved
and that cannot be re-computed are passed over; no source line is known (nodes keep none outside
anomaly mode): the report names the line of the ``backward()`` call instead, as the loss computed
before it (or, where that call is in a library's code, the line that called the model, as the loss
computed after it).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Collection, Iterator
from typing import Any, Callable, NamedTuple

import torch

from ..debug.frames import name_of
from ..summary.rows import with_rows
from .ops import first_input, forward_name, producers, saved_values, sequence_nr
from . import ctc, finite
from .birth import Birth
from .finite import kind_of

log = logging.getLogger("tensor_dap.triggers")

MAX_NODES = 2048  # graph nodes looked at, at most
BUDGET_S = 0.5  # seconds the walk may take (it reads every tensor the loss computation saved)

_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    name: getattr(torch, name) for name in ("log", "log2", "log10", "log1p", "sqrt", "rsqrt", "exp", "exp2",
                                            "expm1", "reciprocal", "lgamma", "digamma", "tan", "asin", "acos",
                                            "atanh", "erfinv", "logit")
}

_REDUCTIONS = ("none", "mean", "sum")  # the enum a loss node saves as its ``reduction``
# Loss functions that make NaN/Inf from finite inputs: a squared error that overflows; a mean negative
# log-likelihood over no target at all (every one the ignore_index: 0/0). ``total_weight`` 0 says the latter.
_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, dict[str, Any]], torch.Tensor]] = {
    "mse_loss": lambda x, t, s: torch.nn.functional.mse_loss(x, t, reduction=_REDUCTIONS[s.get("reduction", 1)]),
    "nll_loss": lambda x, t, s: torch.nn.functional.nll_loss(
        x, t, weight=s.get("weight"), reduction=_REDUCTIONS[s.get("reduction", 1)],
        ignore_index=_signed(s.get("ignore_index", -100))),
}


def empty_mean(op: str, x: Any, saved: dict[str, Any]) -> bool:
    """A mean over no element, NaN as 0/0: ``x.mean()`` of an empty tensor, or a loss averaging an empty input (a
    selection by a mask with no True: a batch without a positive sample)."""
    if op == "mean":
        return saved.get("self_sym_numel", saved.get("self_numel")) == 0
    return (op.endswith("_loss") or op.startswith("binary_cross_entropy") or op == "kl_div") and \
        isinstance(x, torch.Tensor) and x.numel() == 0 and _REDUCTIONS[saved.get("reduction", 1)] == "mean"


def _signed(value: int) -> int:
    """A node's saved int64 reads back as unsigned (-100 as 2**64 - 100)."""
    return value - (1 << 64) if value >= 1 << 63 else value


class LossGraph(NamedTuple):
    """What the loss's graph says: whether it reaches the model's outputs, and the op that made it non-finite."""

    reaches: bool
    birth: Birth | None


def read(loss: torch.Tensor, model_nodes: Collection[Any] = (), frame: Any = None) -> LossGraph:
    """Walk the graph of ``loss`` over the nodes made after the first of ``model_nodes`` (those that made the
    outputs of the step's forwards: the loss computation's come after them): does it reach them, and which is the
    first op that made a non-finite value from finite inputs (None when none can be told)? ``frame``: where
    ``backward()`` was called: a non-finite tensor the loss took without gradient is named by the variable holding
    it there or above (the line that used it is not in the graph). Never raises: it runs inside the user's
    ``backward()`` call."""
    try:
        graph = _walk(loss, set(model_nodes))
        if frame is not None and graph.birth is not None and graph.birth.phase == "input":
            name = name_of(graph.birth.output, frame, outward=True)  # (saved as it was: the program's own tensor)
            if name is not None:
                graph.birth.note += f"; the program holds it as `{name}`"
        return graph
    except Exception as exc:  # noqa: BLE001 - a graph it cannot read: the report says less, training goes on
        log.debug("loss graph not read: %r", exc)
        return LossGraph(False, None)


def _walk(loss: torch.Tensor, model_nodes: set[Any]) -> LossGraph:
    reached = [False]
    found: list[tuple[int, Birth]] = []
    with torch.no_grad():
        for node in _computation(loss, model_nodes, reached):
            birth = _birth_at(node)
            if birth is not None:
                found.append((sequence_nr(node), birth))
    return LossGraph(reached[0], min(found, key=lambda pair: pair[0])[1] if found else None)


def _computation(loss: torch.Tensor, model_nodes: Collection[Any], reached: list[bool]) -> Iterator[Any]:
    """The nodes of the loss computation, the graph of ``loss`` made after the first of ``model_nodes`` (a step's
    forwards may have loss terms between them): the latest-made first, down towards the model, at most ``MAX_NODES``
    of them, for ``BUDGET_S`` at most; the walk stops at ``model_nodes``. ``reached[0]`` is set to whether the
    graph reaches ``model_nodes``."""
    root = loss.grad_fn
    if root is None:
        return
    after = min((sequence_nr(n) for n in model_nodes), default=-1)
    deadline = time.monotonic() + BUDGET_S
    reached[0] = root in model_nodes
    seen = {root}
    todo = [(-sequence_nr(root), id(root), root)]
    while todo and len(seen) <= MAX_NODES and time.monotonic() < deadline:
        _, _, node = heapq.heappop(todo)
        if node in model_nodes:
            continue  # the model's own nodes: re-run by the replay, not read here
        yield node
        for child, _ in getattr(node, "next_functions", ()):
            if child is None or child in seen:
                continue
            reached[0] = reached[0] or child in model_nodes
            if sequence_nr(child) > after:
                seen.add(child)
                heapq.heappush(todo, (-sequence_nr(child), id(child), child))


# Ops whose backward can make NaN/Inf from finite gradients and inputs: sqrt's at 0 (a distance between equal
# points), a division's by 0, log's at 0, pow's with an exponent below 1 at 0, acos/asin at ±1; CTC's for a sample
# it cannot align (its infinite loss filtered out afterwards: the gradient is NaN whatever multiplies it).
_UNSAFE_BACKWARD = {"sqrt", "rsqrt", "pow", "div", "reciprocal", "log", "log2", "log10", "log1p", "xlogy", "acos",
                    "asin", "atanh", "erfinv", "logit", "cdist", "pdist", "dist", *ctc.OPS}


# Ops that keep some of their input's values out of their output (torch.where's unused branch, an index, a mask): a
# NaN made before one can stay out of the loss and show only in backward.
_HIDING = {"where", "index", "masked_fill", "masked_select", "masked_scatter", "index_select", "gather", "nan_to_num"}


def read_structure(loss: torch.Tensor, model_nodes: Collection[Any] = ()) -> tuple[list[str], bool | None]:
    """What the structure of the loss computation (the graph of ``loss`` after ``model_nodes``) tells, in one walk:
    the kinds of node whose backward can make NaN/Inf from finite values ("SqrtBackward0"), sorted, and whether an op
    there hides values from the loss (``_HIDING``). Only the structure is read, and the numbers its nodes saved (a
    power's exponent): backward() freed the tensors. ``([], None)`` for a graph it cannot read; never raises."""
    try:
        unsafe, hidden = set(), False
        for node in _computation(loss, model_nodes, [False]):
            name = node.name()
            op = forward_name(name)
            if op in _UNSAFE_BACKWARD and _unsafe_exponent(node):
                unsafe.add(name)
            hidden = hidden or op in _HIDING
        return sorted(unsafe), hidden
    except Exception as exc:  # noqa: BLE001 - a graph it cannot read: the report names no op
        log.debug("loss graph structure not read: %r", exc)
        return [], None


def _unsafe_exponent(node: Any) -> bool:
    """A power's backward is unsafe for an exponent below 1 (x ** 0.5 at 0, x ** -1 at 0); not for a square."""
    exponent = getattr(node, "_saved_exponent", None) if node.name() == "PowBackward0" else None
    return not isinstance(exponent, (int, float)) or exponent < 1


def _birth_at(node: Any) -> Birth | None:
    """``node``'s op, when its saved inputs are finite and its output (saved, or computed again) is not; or, when
    one of its saved inputs is non-finite and no op of the graph made it (the batch, a target, a buffer), that
    input, first used by ``node``'s op."""
    saved = saved_values(node)
    results = [saved.pop(key) for key in sorted(saved) if key.startswith("result")]  # result; result0, result1...
    result = results[0] if results else None  # the op's first output (ctc_loss: each sample's loss)
    op = forward_name(node.name())
    if op in _LOSSES:  # the scores and the targets, in the op's order (class indices too: the diagnosis reads them)
        inputs = [(name, saved[key]) for name, key in (("input", "self"), ("target", "target"))
                  if isinstance(saved.get(key), torch.Tensor)]
    elif op in ctc.OPS:  # its lengths as tensors (saved as ints): the diagnosis names the samples too short
        inputs = [(name, v) for name, v in ctc.arguments(list(saved.items())).items()]
    else:
        inputs = [("input" if name == "self" else name, v) for name, v in saved.items()
                  if isinstance(v, torch.Tensor) and v.is_floating_point()]
    for name, v in inputs:
        kind = kind_of(v)
        if kind is not None:  # born earlier: in the graph (passed over here), or before it
            return None if v.requires_grad or v.grad_fn is not None else _came_in(op, name, v, kind)
    inputs = [(name, v.detach()) for name, v in inputs]
    output = result if isinstance(result, torch.Tensor) else _recompute(op, saved)
    kind = kind_of(output)
    if kind is None:
        return None
    kept = {"ignore_index": _signed(saved["ignore_index"])} if op == "nll_loss" and "ignore_index" in saved else {}
    return Birth("loss", op, kind, inputs=inputs, output=output.detach(), made_by=producers(first_input(node)),
                 saved=kept, note="born in the loss computation outside the model, between the model's call and "
                 "backward() (read from the loss's autograd graph: the loss function is not re-run, so the op's own "
                 "line is not known; hand the step to watch.step for it)")


def _came_in(op: str, name: str, t: torch.Tensor, kind: str) -> Birth:
    """A non-finite tensor the graph did not make (no gradient flows into it): data, or computed from it (returns
    normalized by a std), first used by ``op``."""
    return Birth("input", op, kind, inputs=[(name, t)], output=t,
                 note=with_rows(f"the {name} of {op} is already non-finite and no gradient flows into it: it came in "
                                "with the batch, or was computed from it outside autograd; read from the loss's "
                                "autograd graph, so the line that used it is not known", t))  # (a NaN label's samples)


def _recompute(op: str, saved: dict[str, Any]) -> torch.Tensor | None:
    """The op's output from its saved inputs, for the ops that turn finite values non-finite. Elementwise
    ops on a large input run slice by slice (the slice holding the first NaN/Inf stands for the output);
    a binary op whose result would be large is not re-computed."""
    x, other = saved.get("self"), saved.get("other")
    try:
        if empty_mean(op, x, saved):
            return torch.tensor(float("nan"))  # 0/0
        if op in _UNARY and isinstance(x, torch.Tensor):
            return _sliced(_UNARY[op], x)
        if op == "pow" and isinstance(x, torch.Tensor) and "exponent" in saved:
            exponent = saved["exponent"]
            return _sliced(lambda piece: torch.pow(piece, exponent), x)
        if _numel(x, other) > finite.SLICE_ELEMENTS:
            return None
        if op == "div" and isinstance(other, (torch.Tensor, int, float)):
            if isinstance(x, torch.Tensor):
                return torch.div(x, other)
            divisor = torch.as_tensor(other)  # x itself not saved: x / 0 is never finite, whatever x is
            return torch.where(divisor == 0, torch.tensor(float("inf")), divisor.new_zeros(()))
        if op in ("mul", "xlogy") and isinstance(x, torch.Tensor) and isinstance(other, torch.Tensor):
            return getattr(torch, op)(x, other)
        if op in _LOSSES and isinstance(x, torch.Tensor) and isinstance(saved.get("target"), torch.Tensor):
            return _LOSSES[op](x, saved["target"], saved)
    except Exception:  # noqa: BLE001 - shapes or dtypes the op refuses now: not known
        return None
    return None


def _sliced(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor | None:
    if x.numel() <= finite.SLICE_ELEMENTS:
        return fn(x)
    for piece in finite.slices(x, finite.SLICE_ELEMENTS):
        out = fn(piece)
        if kind_of(out) is not None:
            return out
    return None  # finite everywhere


def _numel(*operands: Any) -> int:
    """Elements of the broadcast result of the tensor operands (1 for numbers). Worked out here:
    ``torch.broadcast_shapes`` imports sympy on its first call (half a second inside the user's backward())."""
    shapes = [tuple(t.shape) for t in operands if isinstance(t, torch.Tensor)]
    total = 1
    for i in range(1, max(map(len, shapes), default=0) + 1):
        sizes = {shape[-i] for shape in shapes if len(shape) >= i} - {1}
        if len(sizes) > 1:
            return 1 << 62  # not broadcastable: the op would refuse them
        total *= sizes.pop() if sizes else 1
    return total
