"""One forward of the model, as the unchanged loop keeps it (``loop``), and how a step is run again from them.

A forward keeps references to its arguments, the RNG states it drew from, the gradient that reached its
outputs, and the user's lines that called the model and ``backward()``: enough to run the model's forward
and backward again exactly (``replay_forwards``), in a report's re-run or from an incident bundle.
"""

from __future__ import annotations

import contextlib
import re
import sys
import weakref
from collections.abc import Iterator
from typing import Any, Callable

import torch

from ..debug.frames import Site, SourceLine, site_line, stand_in
from ..libraries import is_user_file
from ..nested import map_tensors, walk
from ..state import autocast_as, restore_rng
from ..summary.held import held_bytes
from ..summary.rows import with_rows
from .birth import Birth, Born
from .loss_graph import read_structure
from .ops import forward_name, graph_nodes
from .finite import kind_of
from .origin import GRAD_AT_OUTPUTS


class Forward:
    """One forward of the root module: its arguments, RNG states, and the gradients its outputs received.

    Made in every training step (``LoopCapture._begin``): only the first five attributes are set then; the
    others keep their class defaults until a step sets them. Lines are kept as ``Site``s and resolved when a
    report asks (``line``, ``call``)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    rng: dict[str, Any]  # the RNG states it drew from
    probing: bool  # this forward keeps every RNG state, to learn which ones the model draws from
    call_at: Site  # the user's line that called the model (``model(x)``)
    grads: list[torch.Tensor | None] | tuple[()] = ()  # by output tensor, in walk order (set by ``_end``)
    backward_at: Site = None  # the user's line running when the output gradient arrived (backward())
    loss: float | torch.Tensor | None = None  # the loss handed to backward() after it (``loss_value``)
    retained: list[tuple[int, torch.Tensor]] | tuple[()] = ()  # small outputs that keep their .grad
    weak: list[tuple[int, weakref.ref]] | tuple[()] = ()  # the same, let go (``weaken``): alive while the user's
    nodes: list[Any] | None = None  # the nodes that made the larger outputs (seen by node hooks)
    larger: list[weakref.ref] | None = None  # those outputs, not kept alive: what made another model's batch
    loss_birth: Birth | None = None  # a non-finite loss's op, read from its graph at backward() (``loss_graph``)
    graph_read = False  # a non-finite loss reaching this forward's outputs had its graph read
    # the last loss handed to backward() after it, until the update: the structure of its graph names the op when a
    # non-finite gradient reaches the outputs (``loss_graph.read_structure``)
    loss_tensor: torch.Tensor | None = None
    entry: str | None = None  # the part of the model it called, for a model with no forward of its own ("critic")
    amp: tuple[tuple[str, str], ...] = ()  # the autocast regions it ran in (``state.autocast_now``): re-run in them

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None, rng: dict[str, Any],
                 probing: bool = False, call_at: Site = None) -> None:
        self.args = args
        self.kwargs = kwargs
        self.rng = rng
        self.probing = probing
        self.call_at = call_at

    @classmethod
    def saved(cls, args: tuple[Any, ...], kwargs: dict[str, Any], rng: dict[str, Any],
              grads: list[torch.Tensor | None], line: SourceLine | None, call: SourceLine | None = None,
              loss: float | torch.Tensor | None = None) -> Forward:
        """A forward read back from an incident bundle (``call``: the line that called the model)."""
        f = cls(args, kwargs, rng, call_at=call)
        f.grads, f.backward_at, f.loss = grads, line, loss
        return f

    @property
    def line(self) -> SourceLine | None:
        return site_line(self.backward_at)

    @property
    def call(self) -> SourceLine | None:
        return site_line(self.call_at)

    def weaken(self, see: Callable[[Forward, int, torch.Tensor], None]) -> None:
        """Hold the outputs weakly, and the nodes not at all: a forward no backward() followed (an evaluation with
        gradients on) keeps its graph alive only if the user does. Hooks on the nodes still see a gradient: ``see``
        puts one on the node of each output that kept its own (REINFORCE keeps the log-probabilities made from
        the outputs, not the outputs)."""
        for i, t in self.retained:
            see(self, i, t)
        self.weak = [*self.weak, *((i, weakref.ref(t)) for i, t in self.retained)]
        self.retained, self.nodes = (), None

    def _kept(self) -> list[tuple[int, torch.Tensor]]:
        """The outputs that keep their .grad: held, or held weakly and still alive."""
        if not self.weak:
            return self.retained  # type: ignore[return-value]
        return [*self.retained, *((i, t) for i, ref in self.weak if (t := ref()) is not None)]

    def reached(self) -> bool:
        """A backward() has reached its outputs (their gradients are seen)."""
        return any(g is not None for g in self.grads) or any(t.grad is not None for _, t in self._kept())

    def model_nodes(self) -> list[Any]:
        """The autograd nodes that made this forward's outputs (the loss computation's come after them)."""
        return [t.grad_fn for _, t in self._kept() if t.grad_fn is not None] + list(self.nodes or ())

    def output_grads(self) -> list[torch.Tensor | None]:
        """The gradients the outputs received: seen by hooks, or kept by small outputs themselves."""
        for i, t in self._kept() if self.weak else self.retained:  # (every step: no call when nothing is weak)
            if self.grads[i] is None:
                self.grads[i] = t.grad
        return self.grads  # type: ignore[return-value]

    def marks(self) -> list[Any]:
        """The gradients its outputs hold now, by identity: a backward that reaches them replaces them."""
        return [*(t.grad for _, t in self._kept()), *self.grads]

    def outputs(self) -> list[torch.Tensor]:
        """The outputs of this forward still alive (while its step is open)."""
        alive = [t for ref in self.larger or () if (t := ref()) is not None]
        return [t for _, t in self._kept()] + alive


def step_nodes(forwards: list[Forward]) -> list[Any]:
    """The nodes that made the outputs of every forward of a step: where its loss computation's graph stops."""
    return [n for f in forwards for n in f.model_nodes()]


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The tensors among a forward's outputs, in a fixed order (a lone tensor or a flat tuple: no walk)."""
    return named_outputs(output)[0]


def named_outputs(output: Any) -> tuple[list[torch.Tensor], list[str] | None]:
    """``output_tensors`` and the path of each in the output (``['loss']``, ``.logits``, ``[0]``); None for a lone
    tensor or a flat tuple of them (nothing named)."""
    if isinstance(output, torch.Tensor):
        return [output], None
    if type(output) in (tuple, list) and all(isinstance(t, torch.Tensor) for t in output):
        return list(output), None
    pairs = list(walk(output))
    return [t for _, t in pairs], [path for path, _ in pairs]


def named_a_loss(path: str | None) -> bool:
    """Whether a scalar a model returned at ``path`` may be its loss: unnamed (a lone scalar, nanoGPT's ``(logits,
    loss)``), or under a name holding "loss" (HF's ``ModelOutput.loss``, a dict's ``"loss"``); not Pyro's AutoNormal
    guide returning its samples, ``{"sigma": ...}``."""
    if path is None:
        return True
    names = [a or b for a, b in re.findall(r"\['([^']*)'\]|\.([A-Za-z_]\w*)", path)]
    return not names or "loss" in names[-1].lower()


def input_bytes(args: Any, kwargs: Any) -> int:
    """The bytes of the tensors a forward was called with, held by the capture: its arguments and the tensors one
    container deep in them (a dict batch). No walk: it runs for every forward of an RL episode, where a small
    tensor is counted by its ``nbytes`` (~0.05 µs; ``held_bytes`` reads the storage, ~1.4: it differs only for a
    broadcast view, which then counts at most ``_SMALL`` too much)."""
    total = 0
    for v in (*args, *kwargs.values()) if kwargs else args:
        inner = v.values() if type(v) is dict else v if isinstance(v, (tuple, list)) else (v,)  # (namedtuples too)
        for t in inner:
            if isinstance(t, torch.Tensor):
                try:
                    n = t.nbytes  # (refused for a sparse tensor)
                except Exception:  # noqa: BLE001
                    n = _SMALL + 1
                total += n if n <= _SMALL else held_bytes(t)
    return total


_SMALL = 64 << 10


def loss_value(loss: torch.Tensor) -> float | torch.Tensor:
    """A loss handed to backward(), as watch keeps it for its reports: on the CPU its value (a read there is no
    sync, and costs less than a detached tensor inside a training step), elsewhere the tensor, detached."""
    return loss.item() if loss.is_cpu else loss.detach()


def loss_line(f: Forward) -> tuple[SourceLine | None, str]:
    """(line, near) naming a loss computed outside the model, whose own line is not known: the ``backward()``
    call after it (the loss is computed "before" it); or, where that call is in a library's code (accelerate,
    Lightning, HF's Trainer) and the model was called from the user's, that call before it ("after")."""
    back, call = f.line, f.call
    if call is not None and (back is None or (not is_user_file(back.file) and is_user_file(call.file))):
        return call, "after"
    return back, "before"


def replay_forwards(model: torch.nn.Module, forwards: list[Forward], rng: dict[str, Any] | None = None) -> None:
    """Run each forward again with its RNG states, then its backward from the gradients its outputs got.

    ``rng``: every RNG state at the step's start, for the streams a forward did not save (host RNGs).
    Raises ``Born`` when a gradient arriving at the outputs is already non-finite: the loss
    computation outside the model produced it. That is said only after the other forwards ran their backward clean:
    a model called again on what its last call made (an ODE solver's stages, an unrolled cell) sends the NaN its
    backward makes in a later call to an earlier call's outputs.
    """
    params: list[torch.Tensor] | None = None
    own: set[int] = set()  # ids of ``params``
    deferred: tuple[Forward, Any, str] | None = None  # the first forward whose outputs got a non-finite gradient
    for f in forwards:
        restore_rng({**(rng or {}), **f.rng})
        args, kwargs, cut = _cut_from_upstream(f.args, f.kwargs)
        with autocast_as(f.amp):  # (the backward below runs outside it, as torch.autocast asks)
            out = (model.get_submodule(f.entry) if f.entry else model)(*args, **kwargs)
        pairs = [(t, g) for t, g in zip(output_tensors(out), f.output_grads()) if g is not None and t.requires_grad]
        if f.loss is not None and (k := kind_of(f.loss)) is not None:  # the model's outputs came out finite
            if f.loss_birth is not None:  # the op, found in the loss's graph when backward() was called
                f.loss_birth.line, f.loss_birth.near = loss_line(f)
                raise Born(f.loss_birth)
            loss = torch.as_tensor(f.loss)
            line, near = loss_line(f)
            raise Born(Birth("loss", None, k, line=line, near=near, inputs=[("loss", loss)], output=loss,
                             note="the loss handed to backward() is non-finite while the model's outputs are "
                             "finite: the loss computation outside the model made it (the unchanged loop does "
                             "not re-run the loss function; hand the step to watch.step to find the op)"))
        if not pairs:
            continue
        bad = next(((g, k) for _, g in pairs if (k := kind_of(g)) is not None), None)
        if bad is not None:
            deferred = deferred or (f, *bad)
            continue
        if params is None:
            params = [p for p in model.parameters() if p.requires_grad]
            own = {id(p) for p in params}
        # Into the model's parameters, and its leaf inputs that take a gradient, only: an input made upstream (a
        # GAN's generator output, whose graph its own backward freed) is cut there (``_cut_from_upstream``), not gone
        # through again. A reentrant checkpoint refuses ``inputs=``: through the whole graph then, as the program's own
        # backward() went.
        outputs = [t for t, _ in pairs]
        leaves = [t for _, t in walk((args, kwargs)) if t.is_leaf and t.requires_grad and id(t) not in own] + cut
        if params and reentrant_checkpoint(outputs):
            with _grads_kept(leaves):
                torch.autograd.backward(outputs, [g for _, g in pairs])  # (the batch's own .grad left as it was)
        elif params:  # and into the inputs the program asked gradients of (an ODE adjoint's state, a PINN's points)
            with _grads_kept(leaves):
                torch.autograd.backward(outputs, [g for _, g in pairs], inputs=params + leaves)
    if deferred is not None:
        raise Born(_sent_by_the_loss(*deferred, forwards))


def _cut_from_upstream(args: tuple[Any, ...], kwargs: dict[str, Any]
                       ) -> tuple[tuple[Any, ...], dict[str, Any], list[torch.Tensor]]:
    """The forward's inputs, each one made upstream with a gradient (another model's output, a GAN's generator's, a
    seq2seq's encoder's) cut from it: a copy of a leaf of its own values that takes a gradient, so the re-run's backward
    goes through the model's ops on it (a ``torch.where(x > 0, x.sqrt(), 0)`` on the encoder's outputs makes its NaN on
    the way there, reaching none of the model's parameters) and stops at the leaf (returned, for ``inputs=``). A copy,
    not the leaf itself: a forward may change its input in place (``h.mul_(2)``), which a leaf refuses. The inputs as
    they are where none is."""
    if not any(t.requires_grad and not t.is_leaf for _, t in walk((args, kwargs))):
        return args, kwargs, []
    cut: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id of the input: (the leaf, the copy the model gets)

    def leaf(t: torch.Tensor) -> torch.Tensor:
        if not t.requires_grad or t.is_leaf:
            return t
        if id(t) not in cut:  # the same tensor passed twice: one leaf
            start = t.detach().requires_grad_()
            cut[id(t)] = (start, start.clone())
        return cut[id(t)][1]

    args, kwargs = map_tensors((args, kwargs), leaf)
    return args, kwargs, [start for start, _ in cut.values()]


def _sent_by_the_loss(f: Forward, grad: torch.Tensor, kind: str, forwards: list[Forward]) -> Birth:
    """A non-finite gradient arrived at ``f``'s outputs and no forward's backward made one: the loss computation
    outside the model made it; the ops there that can, read from the loss's graph."""
    line, near = loss_line(f)
    loss = next((g.loss_tensor for g in reversed(forwards) if g.loss_tensor is not None), None)
    ops, hidden = read_structure(loss, step_nodes(forwards)) if loss is not None else ([], None)
    op = ops[0] if len(ops) == 1 else None
    why = "the unchanged loop does not re-run the loss function"
    if ops:
        why = (f"{' or '.join(ops)}: the {'only op' if op else 'ops'} of the loss computation whose backward "
               "can make NaN/Inf from finite values, read from the structure of the loss's graph (" + why + ")")
    return Birth("loss", op, kind, line=line, near=near, inputs=[(GRAD_AT_OUTPUTS, grad)], output=grad,
                 forward_op=forward_name(op) if op else None,
                 hidden=hidden if op else None,
                 note=with_rows("the gradient arriving at the model's outputs is non-finite", grad) + ": the loss "
                 f"computation outside the model made it ({why}; hand the step to watch.step to find its line)")


@contextlib.contextmanager
def _grads_kept(leaves: list[torch.Tensor]) -> Iterator[None]:
    """Put back the ``.grad`` of ``leaves`` (copies: a backward accumulates into an existing one in place)."""
    saved = [t.grad.clone() if t.grad is not None else None for t in leaves]
    try:
        yield
    finally:
        for t, grad in zip(leaves, saved):
            t.grad = grad


REENTRANT_NODES = 4096  # graph nodes looked at for a reentrant checkpoint, at most (they sit near the outputs)


def reentrant_checkpoint(outputs: list[torch.Tensor]) -> bool:
    """Whether the graph of ``outputs`` holds a ``torch.utils.checkpoint`` with ``use_reentrant=True`` (HF models'
    ``gradient_checkpointing_enable()``): its backward refuses ``backward(inputs=...)``. No walk where the program
    never loaded checkpointing."""
    module = sys.modules.get("torch.utils.checkpoint")
    node_type = getattr(getattr(module, "CheckpointFunction", None), "_backward_cls", None)
    if node_type is None:
        return False
    return any(isinstance(node, node_type) for node in graph_nodes([t.grad_fn for t in outputs], REENTRANT_NODES))


# An op re-run by replay_forwards that has no user frame of its own (a torch layer called by the loop)
# is charged to the line that called the model, not to the optimizer hook the replay runs in.
stand_in(replay_forwards.__code__, lambda frame: getattr(frame.f_locals.get("f"), "call", None))
