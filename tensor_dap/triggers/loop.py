"""The unchanged loop: what ``watch`` keeps from the model's calls to re-run a step nobody handed it.

``with tensor_dap.watch(model, optimizer):`` around an existing loop gives watch no step function, so it keeps what
the model itself saw between two optimizer steps: the root module's forward inputs (references, no copy) and RNG
states for every forward (gradient accumulation runs several), the gradient that reached the model's outputs (kept
by each output, or seen by a hook on the node that made it), the buffers at the first forward, and the line that
called ``backward``. It is recorded by a function in the model's ``_compiled_call_impl``, around torch's own call
(``LoopCapture._wrap``). That is enough to run the model's forward and backward again exactly
(``forwards.replay_forwards``); the loss function, outside the model, is not re-run: a NaN born there is named as a
non-finite gradient arriving at the model's outputs, with the line of the ``backward()`` call.

A step starts at the first forward after an optimizer step or after the gradients were reset (``zero_grad``), so a
step a ``GradScaler`` skipped does not run into the next one.
"""

from __future__ import annotations

import sys
import weakref
from functools import partial
from typing import Any, Callable

import torch

from ..errors import STOPS
from ..debug.frames import CallSites, Site, SourceLine, user_line
from ..dynamo import compiler_loaded, compiling, eager, eager_around
from ..state import BufferSnapshot, Buffers, RngUse, autocast_now
from .eval_mode import Evaluations
from .forwards import Forward, input_bytes, named_a_loss, named_outputs
from .loop_losses import StepLosses

MAX_FORWARDS = 4096  # forwards kept per step (an RL episode runs the policy once per environment step); more drops
# the capture, as do the inputs of forwards with no backward() after them (past MAX_UNUSED in a row) adding up to
# more than MAX_HELD_BYTES: an evaluation with gradients on, whose batches the capture would otherwise keep alive
MAX_HELD_BYTES = 64 << 20
# Forwards in a row with no backward() after them whose outputs the capture holds (and so their graphs). Past
# that (an evaluation run with gradients on: no torch.no_grad()), they are held weakly: alive only while the
# user holds them (an RL episode's outputs, backpropagated at its end), freed as without tensor_dap otherwise.
MAX_UNUSED = 8
# An output this small keeps its own gradient (``retain_grad``: torch copies it in C++, no Python call
# in backward); a larger one is seen by a hook on the node that made it (no copy).
RETAIN_BYTES = 1 << 20
# why a step called inside vmap / grad is not kept (its output refuses retain_grad; its inputs die with the transform)
FUNC_TRANSFORM = "the model ran inside a torch.func transform (vmap, grad, jacrev): what it got there dies with it"
_LOSS_BYTES = 16  # a loss the model returns is a scalar: at most this large (complex128)
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
_getframe = sys._getframe
_tracing = torch.compiler.is_dynamo_compiling


_WRAPPED_CALL = torch.nn.Module._wrapped_call_impl  # Module.__call__
_NO_FORWARD = torch.nn.Module.forward  # a model's class that defines none
_ABSENT = object()


def _caller_frames(model: torch.nn.Module) -> int:
    """Frames torch runs between the caller of ``model`` and the capture: ``Module.__call__`` where the
    model's class keeps it, else 0 (``user_line`` walks up: ``OptimizedModule.__call__``, for one)."""
    return int(type(model).__call__ is _WRAPPED_CALL)


class LoopCapture(StepLosses):
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
        self._unused = 0  # forwards since the last backward()
        self._held = 0  # bytes of the inputs of forwards counted past MAX_UNUSED with no backward() (MAX_HELD_BYTES)
        self._probe: torch.Tensor | None = None  # a parameter whose .grad tells that zero_grad ran
        self._rngs = RngUse()  # which RNGs the model's forward draws from
        self._line: Site = None  # the line calling backward() in this step
        self.pending: tuple[Forward, Any, list[Any]] | None = None  # the last loss, not yet settled
        self._depth = 0  # inside the model's call: a nested call of the root module is part of it
        self._calls = CallSites()  # where the model is called from
        self._backwards = CallSites()  # where backward() is called from
        self.evaluations = Evaluations(model)  # the forwards under no_grad: evaluations
        self._wrap()

    def remove(self) -> None:
        self._unwrap()
        self.forwards, self.losses = [], []

    @property
    def between_steps(self) -> bool:
        """The step's update ran, and no forward of the next has begun."""
        return self.updated and not self._open

    @property
    def replayable(self) -> bool:
        return bool(self.forwards) and self.dropped is None

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
        for f in self.forwards:  # keep the outputs' gradients, not the outputs: their graph is then freed where
            if f.retained or f.weak:  # the loop frees it, not at the next forward
                f.output_grads()
                f.retained = f.weak = ()
            if f.nodes is not None:
                f.nodes = f.larger = None
            if f.loss_tensor is not None:
                f.loss_tensor = None  # its graph freed where the loop frees it
        for i, (module, entry, _, call) in enumerate(self._wrapped):
            if module.__dict__.get("_compiled_call_impl") is not call:  # compiled in place (``model.compile()``)
                self._wrapped[i] = self._wrap_one(module, entry)  # since: around that, now
        if self._probe is None:
            self._find_probe()

    def _find_probe(self) -> torch.Tensor | None:
        """A parameter holding a gradient now (None: none does), kept: its .grad gone later tells that the gradients
        were reset."""
        self._probe = next((p for p in self.params if p.grad is not None), None)
        return self._probe

    # ------------------------------------------------------------ the model's call
    # It runs in every training step, where each microsecond of Python costs several (caches are
    # cold after the step's kernels): the common path does as little as it can.
    def _wrap(self) -> None:
        """Put the capture around the model's call: ``Module.__call__`` runs ``_compiled_call_impl`` when a module
        has one (``Module.compile`` sets it), so the model keeps torch's fast path (no hooks of ours for ``_call_impl``
        to dispatch) and one call of ours records the forward before and after it runs. Pickling and ``deepcopy``
        leave it out (``Module.__getstate__``). A model with no ``forward`` of its own (CleanRL's PPO agent: its
        ``get_action_and_value`` calls its ``actor`` and ``critic``) is run through its parts: the capture is around
        each direct child holding parameters too, and a forward keeps the part it called (``Forward.entry``)."""
        model = self.model
        entries = [(name, child) for name, child in model.named_children() if next(child.parameters(), None) is not None
                   ] if getattr(type(model), "forward", None) is _NO_FORWARD else []  # (ScriptModule: no class forward)
        self._wrapped = [self._wrap_one(model, None)] + [self._wrap_one(child, name) for name, child in entries]

    def _wrap_one(self, module: torch.nn.Module, entry: str | None) -> tuple[torch.nn.Module, str | None, Any, Any]:
        """(module, ``entry``, what its ``_compiled_call_impl`` was, the capture's call put there); ``entry``: its
        name in the model, for a part of a model with no forward of its own (None: the model)."""
        saved = module.__dict__.get("_compiled_call_impl", _ABSENT)
        if entry is None:
            self.evaluations.compiled = saved is not _ABSENT or type(module).__name__ == "OptimizedModule"
        inner = module._compiled_call_impl or module._call_impl  # a model compiled in place stays compiled
        begin, end, above = self._begin, self._end, 2 + _caller_frames(module)
        # ``torch.compile(model)`` of a watched model has dynamo trace its call (``_tracing``: a constant there), which
        # then goes to the capture through a mark (``eager_around``): the capture runs as plain Python (its frame
        # walks would break dynamo's graph), the model compiled inside it; the capture's own functions, called while
        # dynamo is on (``compiling``), go through marks too (a few µs a call). The marks come with dynamo (torch.optim
        # loads it); where it is not loaded yet, dynamo traces the capture itself.
        untraced = (eager(begin), eager(end)) if compiler_loaded() else None

        def capture(*args: Any, **kwargs: Any) -> Any:
            traced = untraced if untraced is not None and compiling() else None
            try:
                f = (begin if traced is None else traced[0])(args, kwargs, _getframe(above))  # may fire a trigger
                if entry is not None and f is not None:
                    f.entry = entry
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
                    if (type(output) is _Tensor and not f.probing and output.requires_grad
                            and _LOSS_BYTES < output.nbytes <= RETAIN_BYTES and not output.is_leaf
                            and not output.retains_grad and self._unused <= MAX_UNUSED):  # the common case, here:
                        # logits keep their gradient
                        output.retain_grad()  # (what ``_end`` does with a small output that is not a loss)
                        f.grads, f.retained = [None], [(0, output)]
                    else:
                        (end if traced is None else traced[1])(f, output)
                except Exception:  # noqa: BLE001 - as above: this step is then not replayable
                    self.dropped = _why_failed()
            return output

        marked = eager_around(capture, inner) if untraced is not None else capture

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._depth or not self.enabled:
                return inner(*args, **kwargs)  # a nested call of the root; a re-run
            if not _grad_enabled():  # an evaluation: in train mode? dropout on in eval mode?
                return self.evaluations.forward(inner, args, kwargs)
            return (marked if _tracing() else capture)(*args, **kwargs)

        module.__dict__["_compiled_call_impl"] = call  # (not setattr: Fabric's wrapper hands that to the module inside)
        return module, entry, saved, call

    def _unwrap(self) -> None:
        """Give the model (and its parts) their own calls back (unless something replaced ours since: theirs stays)."""
        for module, _, saved, call in self._wrapped:
            if module.__dict__.get("_compiled_call_impl") is call:
                if saved is _ABSENT:
                    del module.__dict__["_compiled_call_impl"]
                else:
                    module.__dict__["_compiled_call_impl"] = saved

    def begin_running(self, module: torch.nn.Module, args: Any) -> None:
        """A forward of the model (or of a part: ``_wrap``) running when the capture began (a watch attached from inside
        it: ``attach``): recorded now, and its output by a forward hook that removes itself (not for TorchScript's,
        which takes no hooks: that first step is checked, not re-run)."""
        if isinstance(module, torch.jit.ScriptModule):
            self.dropped = "the watch began inside this step's call of a TorchScript module, which takes no hooks"
            return
        entry = next((e for m, e, _, _ in self._wrapped if m is module), _ABSENT)
        f = self._begin(args, None, _getframe(1)) if self.enabled and _grad_enabled() and entry is not _ABSENT else None
        if f is None:
            return
        f.entry = entry

        def returned(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            handle.remove()
            if f.args is args:
                f.kwargs = kwargs
                self._end(f, output)

        handle = module.register_forward_hook(returned, with_kwargs=True)

    def _begin(self, args: Any, kwargs: Any, caller: Any) -> Forward | None:
        """A forward of the root module starts: the first after an update opens a step. ``caller``: the frame
        that called the model (or torch's frame below it)."""
        if self._open:
            probe = self._probe
            if probe is None and self._backward_seen:  # no update yet (a GradScaler skipping the first steps)
                reset = self._find_probe() is None  # every gradient gone since a backward(): reset
            else:
                reset = (self._backward_seen or self._unused > MAX_UNUSED) and probe is not None and probe.grad is None
            if reset:
                self._open = False  # gradients were reset with no update in between: a skipped step
                if self._backward_seen and not self.updated:  # (or an evaluation before the next step)
                    self.on_unstepped()
        if self._open:
            forwards = self.forwards
            self._unused += 1
            if self._unused > MAX_UNUSED:
                if self._unused == MAX_UNUSED + 1:  # the ones after are held weakly from their start (``_end``)
                    for f in forwards[-MAX_UNUSED:]:
                        if f.retained or f.nodes:
                            f.weaken(self._see_at_node)
                self._held += input_bytes(args, kwargs)
                if self._held > MAX_HELD_BYTES and self.dropped is None:
                    return self._drop(f"the inputs of the forwards with no backward() after them passed "
                                      f"{MAX_HELD_BYTES >> 20} MiB (an evaluation with gradients on?)")
            if len(forwards) >= MAX_FORWARDS or self.dropped is not None:
                return self._drop(f"more than {MAX_FORWARDS} forwards between two optimizer steps")
        else:  # a new step
            if self.pending is not None:
                self.settle()  # a loss handed to backward() after the last update counts, as it came, in this step
            self._open = True
            self._backward_seen = self.updated = False
            self.dropped = self._line = None
            self._unused, self._held, self.evaluations.count = 1, 0, 0
            self.forwards = forwards = []
            self.losses = []
            self.start = self.buffers.save()
        rng, probing = self._rngs.before()
        f = Forward(args, kwargs, rng, probing, self._calls.at(caller))  # the line: resolved when a report asks
        if _any_autocast():  # (one C call a forward)
            f.amp = autocast_now()
        forwards.append(f)
        return f

    def _drop(self, why: str) -> None:  # too much to keep in one step (the model called outside training)
        if self.dropped is None:
            self.dropped = why
            self.forwards = []

    def _end(self, f: Forward, output: Any) -> None:
        """The forward ``f`` returned ``output``: see the gradients its outputs will get."""
        if f.probing:
            self._rngs.after(f.rng)
        tensors, paths = named_outputs(output)
        f.grads = [None] * len(tensors)
        loss = None
        for i, t in enumerate(tensors):  # (no grad_fn read: it makes a Python object of the node, ~3 µs)
            if not t.requires_grad:
                continue
            size = t.nbytes
            if loss is None and size <= _LOSS_BYTES and t.dim() == 0 and t.is_floating_point() and \
                    named_a_loss(paths[i] if paths else None):
                loss = t.detach()  # a loss computed inside the model
                self.losses.append(loss)
            if self._unused > MAX_UNUSED and self._see_at_node(f, i, t) is not None:  # no backward() for a while:
                f.weak = [*f.weak, (i, weakref.ref(t))]  # held weakly (an RL episode's outputs; an evaluation's, freed
                # as the user lets go)
            elif size <= RETAIN_BYTES and not t.is_leaf and not t.retains_grad:
                t.retain_grad()  # a small output keeps its own gradient: torch copies it in C++, no Python in backward
                f.retained = [*f.retained, (i, t)]
            else:
                self._keep_grad(f, i, t)

    def _keep_grad(self, f: Forward, i: int, t: torch.Tensor) -> None:
        """See the gradient that will reach output ``i`` (``t``) in backward, where the output does not keep
        it itself (``_end``)."""
        node = self._see_at_node(f, i, t)  # the same gradient, seen by the node that made t: ~7 µs against ~40 for a
        if node is None:  # tensor hook; but a leaf returned as it is (a parameter): only a tensor hook sees it
            t.register_hook(partial(self._grad, f, i))
        else:
            f.nodes, f.larger = [*(f.nodes or ()), node], [*(f.larger or ()), weakref.ref(t)]

    def _see_at_node(self, f: Forward, i: int, t: torch.Tensor) -> Any:
        """See output ``i``'s gradient at the node that made ``t`` (returned; None for a leaf), holding neither."""
        node = t.grad_fn
        if node is not None:
            node.register_prehook(partial(self._node_grad, f, i, t.output_nr))
        return node

    def _node_grad(self, f: Forward, i: int, nr: int, grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
        grad = grad_outputs[nr] if nr < len(grad_outputs) else None
        if grad is not None:
            self._grad(f, i, grad)

    def _grad(self, f: Forward, i: int, grad: torch.Tensor) -> None:
        f.grads[i] = grad
        self._backward_seen = True
        if f.backward_at is None:
            f.backward_at = self._line or self._backward_line()

    def _backward_line(self) -> SourceLine | None:
        """The line that called backward(), looked up once a step (micro-batches call it from one line)."""
        self._line = user_line()
        return self._line


def _why_failed() -> str:
    """Why the capture let a step go (asked only when it failed): inside a torch.func transform, or not known."""
    try:
        inside = torch._C._functorch.peek_interpreter_stack() is not None
    except Exception:  # noqa: BLE001 - a torch without functorch's interpreter stack
        inside = False
    return FUNC_TRANSFORM if inside else "the capture failed"
