"""The unchanged loop: what ``watch`` keeps from hooks to re-run a step nobody handed it.

``with tensor_dap.watch(model, optimizer):`` around an existing loop gives watch no step
function, so it keeps what the model itself saw between two optimizer steps: the root module's
forward inputs (references, no copy) and RNG states for every forward (gradient accumulation
runs several), the gradient that reached the model's outputs (from a hook on each output), the
buffers at the first forward, and the line that called ``backward``. That is enough to run the
model's forward and backward again exactly (``replay_forwards``); the loss function itself,
outside the model, is not re-run: a NaN born there is named as a non-finite gradient arriving at
the model's outputs, with the line of the ``backward()`` call.

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


def _hook_frames() -> int:
    """Frames torch runs between a module's caller and its forward hooks: ``Module.__call__``
    (``_wrapped_call_impl``), ``_call_impl`` and its ``inner`` closure where this torch has them. The
    hooks' ``user_line`` starts at the caller with no frame objects made for these (each ~1 µs in a step).
    Counting fewer than there are would only make it walk; more, never (a frame not made by torch)."""
    call_impl = torch.nn.Module._call_impl
    inner = any(getattr(c, "co_name", None) == "inner" for c in call_impl.__code__.co_consts)
    wrapped = getattr(torch.nn.Module, "_wrapped_call_impl", None)
    return 1 + inner + (wrapped is not None and torch.nn.Module.__call__ is wrapped)


HOOK_FRAMES = _hook_frames()


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
        self._nested = False  # the root module was seen calling itself: its forwards need the pre-hook
        self._lean_left = 0  # forwards recorded by the forward hook alone before the next probe
        self._probed = False  # a forward of this step probed which RNGs it draws from: choose the hooks after it
        # The pre-hook is there only while something must be read before a forward runs (RNG states, buffers,
        # a probe of which RNGs it draws from): otherwise the forward hook records the forward (``_choose_hooks``).
        self._pre_handle: Any = model.register_forward_pre_hook(self._pre, with_kwargs=True)
        self._post_handle = model.register_forward_hook(self._post, with_kwargs=True)

    def remove(self) -> None:
        for h in (self._pre_handle, self._post_handle):
            if h is not None:
                h.remove()
        self._pre_handle = self._post_handle = None
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
        self.settle()
        if not (self.enabled and self.forwards):
            return
        f = self.forwards[-1]
        self._pending = (f, kept, f.marks() if shared else [])  # alone, nothing to tell apart: it is this step's
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
        if self._probed:
            self._probed = False
            self._choose_hooks()
        if self._probe is None:
            self._probe = next((p for p in self.params if p.grad is not None), None)

    # ------------------------------------------------------------ hooks
    # They run in every training step, where each microsecond of Python costs several (caches are
    # cold after the step's kernels): the common path does as little as it can.
    def _pre(self, module: torch.nn.Module, args: Any, kwargs: Any, above: int = HOOK_FRAMES) -> None:
        """``above``: how many frames run between this method and the model's caller (torch's, as a hook)."""
        if self.enabled and _grad_enabled():  # validation under no_grad is not part of a training step
            self._begin(args, kwargs, 1 + above)

    def _begin(self, args: Any, kwargs: Any, above: int, rng: dict[str, Any] | None = None) -> None:
        """A forward of the root module: the first after an update opens a step. ``above``: frames between
        this method and the model's caller; ``rng``: given where nothing was read (the forward draws none)."""
        if self._open:
            probe = self._probe
            if self._backward_seen and probe is not None and probe.grad is None:
                self._open = False  # gradients were reset with no update in between: a skipped step
                if not self.updated:
                    self.on_unstepped()
        if not self._open:
            if self._pending is not None:
                self.settle()  # a loss handed to backward() after the last update counts, as it came, in this step
            self._open, self._backward_seen, self.updated, self.dropped = True, False, False, None
            self.forwards, self.losses, self._line = [], [], None
            self.start = self.buffers.save() if self.buffers.names else _NO_BUFFERS
        forwards = self.forwards
        if len(forwards) >= MAX_FORWARDS:
            self.dropped = f"more than {MAX_FORWARDS} forwards between two optimizer steps"
            self.forwards = []
        elif self.dropped is None:
            rng, probing = (rng, False) if rng is not None else self._rngs.before()
            forwards.append(Forward(args, kwargs, rng, [], None, user_line(skip=1 + above), None, probing, []))

    def _post(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not self.enabled or not _grad_enabled():
            return
        if self._pre_handle is None:  # nothing to read before the forward: it is recorded now (see _choose_hooks)
            self._begin(args, kwargs, 1 + HOOK_FRAMES, {})
            self._lean_left -= 1
            if not self._lean_left:  # the next forward probes the RNGs again: that needs the pre-hook
                self._rngs.probe_next()
                self._pre_handle = self.model.register_forward_pre_hook(self._pre, with_kwargs=True)
        forwards = self.forwards
        if not forwards or self.dropped is not None:
            return
        f = forwards[-1]
        if f.args is not args:
            self._nested = True  # a nested call of the root module: only the pre-hook tells them apart
            return
        if f.kwargs is None:  # captured from a global pre-hook, which torch gives no keyword arguments
            f.kwargs = kwargs
        if f.probing:
            self._rngs.after(f.rng)
            self._probed = True
        tensors = output_tensors(output)
        loss = loss_in(tensors)
        if loss is not None:  # a loss computed inside the model
            self.losses.append(loss)
        f.grads = [None] * len(tensors)
        for i, t in enumerate(tensors):
            if t.requires_grad:
                self._keep_grad(f, i, t)

    def _choose_hooks(self) -> None:
        """At the end of a step that probed: keep the pre-hook only where a forward needs something read
        before it runs (RNG states, buffers). Without it the forward hook records the forward, and puts the
        pre-hook back for one forward every ``RngUse.PROBE_EVERY`` to probe again. (A root module calling
        itself is told apart only by the pre-hook: one seen doing so keeps it; one that starts later is
        recorded twice.)"""
        if self._pre_handle is not None and self._rngs.none and not self.buffers.names and not self._nested:
            self._pre_handle.remove()
            self._pre_handle = None
            self._lean_left = self._rngs.PROBE_EVERY - 1

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
