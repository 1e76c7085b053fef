"""The unchanged loop: what ``watch`` keeps from the model's calls to re-run a step nobody handed it.

``with tensor_dap.watch(model, optimizer):`` around an existing loop gives watch no step
function, so it keeps what the model itself saw between two optimizer steps: the root module's
forward inputs (references, no copy) and RNG states for every forward (gradient accumulation
runs several), the gradient that reached the model's outputs (kept by each output, or seen by a
hook on the node that made it), the buffers at the first forward, and the line that called
``backward``. It is recorded by a function in the model's ``_compiled_call_impl``, around torch's
own call (``LoopCapture._wrap``). That is enough to run the model's forward and backward again
exactly (``replay_forwards``); the loss function itself, outside the model, is not re-run: a NaN
born there is named as a non-finite gradient arriving at the model's outputs, with the line of the
``backward()`` call.

A step starts at the first forward after an optimizer step or after the gradients were reset
(``zero_grad``), so a step a ``GradScaler`` skipped does not run into the next one.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import torch

from ..errors import STOPS
from ..debug.frames import SourceLine, stand_in, user_line
from ..nested import walk
from ..state import BufferSnapshot, Buffers, RngUse, restore_rng
from .loss_graph import read as read_loss
from .origin import Birth, Born, kind_of

MAX_FORWARDS = 64  # forwards kept per step; more (a loop calling the model outside training) drops the capture
# An output this small keeps its own gradient (``retain_grad``: torch copies it in C++, no Python call
# in backward); a larger one is seen by a hook on the node that made it (no copy).
RETAIN_BYTES = 1 << 20
_NO_BUFFERS = BufferSnapshot([], [])
_grad_enabled = torch.is_grad_enabled


_WRAPPED_CALL = torch.nn.Module._wrapped_call_impl  # Module.__call__
_ABSENT = object()


def _caller_frames(model: torch.nn.Module) -> int:
    """Frames torch runs between the caller of ``model`` and the capture: ``Module.__call__`` where the
    model's class keeps it, else 0 (``user_line`` walks up: ``OptimizedModule.__call__``, for one)."""
    return int(type(model).__call__ is _WRAPPED_CALL)


@dataclass(slots=True)
class Forward:
    """One forward of the root module: its arguments, RNG states, and the gradients its outputs received."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: dict[str, Any]
    grads: list[torch.Tensor | None] = field(default_factory=list)  # by output tensor, in walk order
    line: SourceLine | None = None  # the user's line running when the output gradient arrived (backward())
    call: SourceLine | None = None  # the user's line that called the model (``model(x)``)
    loss: torch.Tensor | None = None  # the loss handed to backward() after this forward (``loss_tap``)
    probing: bool = False  # this forward keeps every RNG state, to learn which ones the model draws from
    retained: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # small outputs that keep their .grad
    nodes: list[Any] | None = None  # the nodes that made the larger outputs (seen by node hooks)
    larger: list[weakref.ref] | None = None  # those outputs, not kept alive: what made another model's batch
    loss_birth: Birth | None = None  # a non-finite loss's op, read from its graph at backward() (``loss_graph``)
    graph_read: bool = False  # a non-finite loss reaching this forward's outputs had its graph read

    def model_nodes(self) -> list[Any]:
        """The autograd nodes that made this forward's outputs (the loss computation's come after them)."""
        return [t.grad_fn for _, t in self.retained if t.grad_fn is not None] + list(self.nodes or ())

    def output_grads(self) -> list[torch.Tensor | None]:
        """The gradients the outputs received: seen by hooks, or kept by small outputs themselves."""
        for i, t in self.retained:
            if self.grads[i] is None:
                self.grads[i] = t.grad
        return self.grads

    def marks(self) -> list[Any]:
        """The gradients its outputs hold now, by identity: a backward that reaches them replaces them."""
        return [t.grad for _, t in self.retained] + self.grads

    def outputs(self) -> list[torch.Tensor]:
        """The outputs of this forward still alive (while its step is open)."""
        alive = [t for ref in self.larger or () if (t := ref()) is not None]
        return [t for _, t in self.retained] + alive

    def let_go(self) -> None:
        """The step is over: keep the outputs' gradients, not the outputs (their graph is then freed where
        the loop frees it, not at the next forward)."""
        if self.retained:
            self.output_grads()
            self.retained = []
        self.nodes = self.larger = None


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The tensors among a forward's outputs, in a fixed order (a lone tensor or a flat tuple: no walk)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if type(output) in (tuple, list) and all(isinstance(t, torch.Tensor) for t in output):
        return list(output)
    return [t for _, t in walk(output)]


def loss_in(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """A scalar floating tensor that requires grad among the model's outputs: a loss computed inside the model."""
    for t in tensors:
        if t.dim() == 0 and t.requires_grad and t.is_floating_point():
            return t.detach()
    return None


def replay_forwards(model: torch.nn.Module, forwards: list[Forward], rng: dict[str, Any] | None = None) -> None:
    """Run each forward again with its RNG states, then its backward from the gradients its outputs got.

    ``rng``: every RNG state at the step's start, for the streams a forward did not save (host RNGs).
    Raises ``Born`` when a gradient arriving at the outputs is already non-finite: the loss
    computation outside the model produced it.
    """
    for f in forwards:
        restore_rng({**(rng or {}), **f.rng})
        out = model(*f.args, **f.kwargs)
        pairs = [(t, g) for t, g in zip(output_tensors(out), f.output_grads()) if g is not None and t.requires_grad]
        if f.loss is not None and (k := kind_of(f.loss)) is not None:  # the model's outputs came out finite
            if f.loss_birth is not None:  # the op, found in the loss's graph when backward() was called
                f.loss_birth.line = f.line or f.call
                raise Born(f.loss_birth)
            raise Born(Birth("loss", None, k, line=f.line or f.call, inputs=[("loss", f.loss)], output=f.loss,
                             note="the loss handed to backward() is non-finite while the model's outputs are "
                             "finite: the loss computation outside the model made it (the unchanged loop does "
                             "not re-run the loss function; hand the step to watch.step to find the op)"))
        if not pairs:
            continue
        bad = next(((t, g, k) for t, g in pairs if (k := kind_of(g)) is not None), None)
        if bad is not None:
            raise Born(Birth("loss", None, bad[2], line=f.line, inputs=[("grad at the model's output", bad[1])],
                             output=bad[1], note="the gradient arriving at the model's outputs is non-finite: the "
                             "loss computation outside the model made it (the unchanged loop does not re-run "
                             "the loss function; hand the step to watch.step to find the op)"))
        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])


# An op re-run by replay_forwards that has no user frame of its own (a torch layer called by the loop)
# is charged to the line that called the model, not to the optimizer hook the replay runs in.
stand_in(replay_forwards.__code__, lambda frame: getattr(frame.f_locals.get("f"), "call", None))


class LoopCapture:
    """Hooks on the root module that keep each step's forwards; ``steps`` tells it when an update happened.

    ``on_unstepped()`` is called when a step ended without an optimizer update (a ``GradScaler``
    skipped it, or the loop is accumulating in a way that resets gradients): watch checks
    the scaler and the loss there.
    """

    def __init__(self, model: torch.nn.Module, buffers: Buffers, params: list[torch.Tensor],
                 on_unstepped: Callable[[], None], on_loss: Callable[[torch.Tensor], None]) -> None:
        self.model = model
        self.on_loss = on_loss  # a loss handed to backward() that reached the model's outputs: the step's
        self.buffers = buffers
        self.params = params
        self.on_unstepped = on_unstepped
        self.enabled = True  # off while watch re-runs the model itself
        self.forwards: list[Forward] = []
        self.start: BufferSnapshot | None = None  # buffers at the step's first forward
        self.losses: list[torch.Tensor] = []  # losses the model returned in this step
        self.dropped: str | None = None  # why this step cannot be replayed
        self.updated = False  # the step's optimizer update ran
        self._open = False
        self._backward_seen = False
        self._probe: torch.Tensor | None = None  # a parameter whose .grad tells that zero_grad ran
        self._rngs = RngUse()  # which RNGs the model's forward draws from
        self._line: SourceLine | None = None  # the line calling backward() in this step
        self._pending: tuple[Forward, torch.Tensor, list[Any]] | None = None  # the last loss, not yet settled
        self._depth = 0  # inside the model's call: a nested call of the root module is part of it
        self._above = _caller_frames(model)
        self._wrap()

    def remove(self) -> None:
        self._unwrap()
        self.forwards, self.losses = [], []

    @property
    def replayable(self) -> bool:
        return bool(self.forwards) and self.dropped is None

    def backward_called(self, loss: torch.Tensor, kept: torch.Tensor, shared: bool) -> None:
        """A loss was handed to backward() (watch's ``loss_tap`` listener calls this; ``kept``: it detached).
        Every backward() of the program comes here, and is settled at the next backward or the step's end
        (``settle``). With one watch open, it is the latest forward's; with several (``shared``: a GAN's two
        models), not every loss reaches every model: it is this step's once the gradients of the latest
        forward's outputs are seen replaced by it. A non-finite loss on the CPU (read now: no sync; on an
        accelerator that read would stall the step) has its graph read before backward() frees what its nodes
        saved: if it reaches the outputs, it is the forward's loss, with the op that made it (``loss_graph``)
        and this backward()'s line. The line calling backward() is looked up once a step."""
        if self._pending is not None:
            self.settle()
        forwards = self.forwards
        if not (self.enabled and forwards):
            return
        f = forwards[-1]
        if shared:
            self._pending = (f, kept, f.marks())
        else:  # alone, nothing to tell apart: it is this step's
            self._accept(f, kept)
        if self._line is None:  # above: watch's listener, loss_tap's wrapper, then Tensor.backward or the
            self._line = user_line(skip=3)  # caller of torch.autograd.backward
        if not f.graph_read and kept.is_cpu and not math.isfinite(kept.item()):
            graph = read_loss(loss, f.model_nodes())
            if graph.reaches:
                f.loss, f.loss_birth, f.line, f.graph_read = kept, graph.birth, user_line(skip=3), True
        if f.retained:
            self._backward_seen = True
            if f.line is None:
                f.line = self._line

    def settle(self) -> None:
        """The last loss handed to backward() is this step's if it reached the latest forward's outputs."""
        pending, self._pending = self._pending, None
        if pending is not None:
            f, kept, before = pending
            if not before or any(now is not then for now, then in zip(f.marks(), before)):  # none: not told apart
                self._accept(f, kept)

    def _accept(self, f: Forward, kept: torch.Tensor) -> None:
        """``kept`` is the loss of ``f``'s step."""
        if f.loss is None:
            f.loss = kept
        self.on_loss(kept)

    def made(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is (a view of) an output of a forward of the step now open: another model's batch
        made by this one (a GAN's generator output fed to the discriminator, detached or not)."""
        try:
            memory = t.untyped_storage().data_ptr()
            return self._open and any(o.untyped_storage().data_ptr() == memory
                                      for f in self.forwards for o in f.outputs())
        except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse): not one of ours
            return False

    def stepped(self) -> None:
        """The optimizer updated: the next forward starts a new step."""
        self._open = False
        self.updated = True
        for f in self.forwards:
            f.let_go()
        if self.model.__dict__.get("_compiled_call_impl") is not self._call:
            self._wrap()  # the model was compiled in place (``model.compile()``) since: around that, now
        if self._probe is None:
            self._probe = next((p for p in self.params if p.grad is not None), None)

    # ------------------------------------------------------------ the model's call
    # It runs in every training step, where each microsecond of Python costs several (caches are
    # cold after the step's kernels): the common path does as little as it can.
    def _wrap(self) -> None:
        """Put the capture around the model's call: ``Module.__call__`` runs ``_compiled_call_impl``
        when a module has one (``Module.compile`` sets it), so the model keeps torch's fast path (no
        hooks of ours for ``_call_impl`` to dispatch) and one call of ours records the forward before
        and after it runs. Pickling and ``copy.deepcopy`` leave it out (``Module.__getstate__``)."""
        model = self.model
        self._saved = model.__dict__.get("_compiled_call_impl", _ABSENT)
        inner = model._compiled_call_impl or model._call_impl  # a model compiled in place stays compiled
        begin, end = self._begin, self._end

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._depth or not self.enabled or not _grad_enabled():
                return inner(*args, **kwargs)  # a nested call of the root; a re-run; evaluation under no_grad
            try:
                f = begin(args, kwargs, self._above)  # may fire a trigger (a step the GradScaler skipped)
            except STOPS:
                raise
            except Exception:  # noqa: BLE001 - the capture's failure must not stop training
                f = None
            self._depth = 1
            try:
                output = inner(*args, **kwargs)
            finally:
                self._depth = 0
            if f is not None:
                try:
                    end(f, output)
                except Exception:  # noqa: BLE001 - as above: this step is then not replayable
                    self.dropped = "the capture failed"
            return output

        self._call = call
        model._compiled_call_impl = call

    def _unwrap(self) -> None:
        """Give the model back its own call (unless something replaced ours since: then theirs stays)."""
        model = self.model
        if model.__dict__.get("_compiled_call_impl") is self._call:
            if self._saved is _ABSENT:
                del model.__dict__["_compiled_call_impl"]
            else:
                model.__dict__["_compiled_call_impl"] = self._saved

    def begin_running(self, args: Any) -> None:
        """A forward of the model already running when the capture began (a watch attached from inside it:
        ``attach``): recorded now, and its output by a forward hook that removes itself."""
        if not (self.enabled and _grad_enabled()):
            return
        f = self._begin(args, None, 0)
        if f is None:
            return

        def returned(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            handle.remove()
            if f.args is args:
                f.kwargs = kwargs
                self._end(f, output)

        handle = self.model.register_forward_hook(returned, with_kwargs=True)

    def _begin(self, args: Any, kwargs: Any, above: int) -> Forward | None:
        """A forward of the root module starts: the first after an update opens a step. ``above``: frames
        between the caller of this method and the model's caller (torch's)."""
        if self._open:
            probe = self._probe
            if self._backward_seen and probe is not None and probe.grad is None:
                self._open = False  # gradients were reset with no update in between: a skipped step
                if not self.updated:
                    self.on_unstepped()
        if not self._open:
            self._open_step()
        forwards = self.forwards
        if len(forwards) >= MAX_FORWARDS or self.dropped is not None:
            return self._drop()
        rng, probing = self._rngs.before()
        f = Forward(args, kwargs, rng, [], None, user_line(skip=2 + above), None, probing, [])
        forwards.append(f)
        return f

    def _open_step(self) -> None:
        if self._pending is not None:
            self.settle()  # a loss handed to backward() after the last update counts, as it came, in this step
        self._open, self._backward_seen, self.updated, self.dropped = True, False, False, None
        self.forwards, self.losses, self._line = [], [], None
        self.start = self.buffers.save() if self.buffers.names else _NO_BUFFERS

    def _drop(self) -> None:  # too many forwards in one step (the model called outside training)
        if self.dropped is None:
            self.dropped = f"more than {MAX_FORWARDS} forwards between two optimizer steps"
            self.forwards = []

    def _end(self, f: Forward, output: Any) -> None:
        """The forward ``f`` returned ``output``: see the gradients its outputs will get."""
        if f.probing:
            self._rngs.after(f.rng)
        tensors = output_tensors(output)
        loss = loss_in(tensors)
        if loss is not None:  # a loss computed inside the model
            self.losses.append(loss)
        f.grads = [None] * len(tensors)
        for i, t in enumerate(tensors):
            if t.requires_grad:
                self._keep_grad(f, i, t)

    def _keep_grad(self, f: Forward, i: int, t: torch.Tensor) -> None:
        """See the gradient that will reach output ``i`` (``t``) in backward."""
        if t.is_leaf:  # a leaf returned as it is (a parameter): only a tensor hook sees its gradient
            t.register_hook(partial(self._grad, f, i))
        elif t.nbytes <= RETAIN_BYTES and not t.retains_grad:
            t.retain_grad()
            f.retained.append((i, t))
        else:  # the same gradient, seen by the node that made t: ~7 µs against ~40 for a tensor hook
            node = t.grad_fn
            node.register_prehook(partial(self._node_grad, f, i, t.output_nr))
            f.nodes, f.larger = [*(f.nodes or ()), node], [*(f.larger or ()), weakref.ref(t)]

    def _node_grad(self, f: Forward, i: int, nr: int, grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
        grad = grad_outputs[nr] if nr < len(grad_outputs) else None
        if grad is not None:
            self._grad(f, i, grad)

    def _grad(self, f: Forward, i: int, grad: torch.Tensor) -> None:
        f.grads[i] = grad
        self._backward_seen = True
        if f.line is None:
            f.line = self._line or self._backward_line()

    def _backward_line(self) -> SourceLine | None:
        """The line that called backward(), looked up once a step (micro-batches call it from one line)."""
        self._line = user_line()
        return self._line
