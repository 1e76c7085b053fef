"""Where a NaN/Inf was born: the op, the innermost module whose own code ran it, and the user's line.

Runs only inside localization's re-run of one failing step, so it may be thorough: a
``TorchFunctionMode`` sees every torch call of the forward (``softmax``, ``div``, ``linear``...),
checks its outputs, and keeps a *lineage* for each non-finite tensor: the birth it descends from.
A birth is an op whose output holds NaN while no input does, or Inf while every input is finite. Each
autograd node the forward creates is remembered with the op, module and line that made it, and a hook on
the node names it when its backward turns finite gradients into non-finite ones (``SqrtBackward0``).

Not every Inf is a bug: ``masked_fill(mask, -inf)`` and ``-inf`` mask buffers are deliberate, and they only
matter once they make a NaN (a fully masked softmax row). Births from a non-finite Python constant, and
Inf-only tensors that existed before the step (buffers, constants), are marked ``deliberate``; ``root``
follows a NaN back to the first accidental birth, stopping at deliberate ones (the op that went wrong).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import weakref
from dataclasses import replace
from collections.abc import Iterator
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from ..debug.frames import SourceLine, user_frame, user_line
from ..kinds import class_name
from ..summary.rows import with_rows
from . import as_called
from .birth import Birth, Born, module_label, root, storage_of
from .finite import kind_of
from .ops import (anomaly_line, first_input, forward_name, inplace, next_sequence_nr, op_name, op_tensors, producers,
                  running_stats, saved_values, scalar_kind, sequence_nr)
from .python_backward import PythonBackwards, written_in_python

log = logging.getLogger("tensor_dap.triggers")

MAX_NODES = 256  # autograd nodes discovered behind one op's output (the inside of composite ops)
_BACKWARD = ("backward", "grad")  # Tensor.backward, torch.autograd.backward / grad: the loss is known here
GRAD_AT_OUTPUTS = "grad at the model's output"  # the input of a loss-phase birth seen in the loss's backward


class Tracker(TorchFunctionMode):
    """Install with ``with tracker:`` around the re-run; modules report entry/exit via ``enter``/``leave``.

    It raises ``Born`` at a birth that matters, to stop the re-run: from a node hook when a
    backward node makes the first non-finite gradient, and when ``backward`` starts from a
    non-finite loss. Forward births are only recorded here; whether one matters (a module's
    output carries it) is asked through ``verdict``.
    """

    def __init__(self, model: torch.nn.Module, python_backwards: bool = True) -> None:
        super().__init__()
        self.names = {id(m): path for path, m in model.named_modules()}
        self.stack: list[torch.nn.Module] = []
        self._entries: list[int] = []  # the autograd sequence number each module on the stack was entered at
        self.model_done = False  # the root module's forward has returned once: ops outside modules are the loss
        self.inputs: set[int] = set()
        self._lineage: dict[int, tuple[Any, str, Birth]] = {}  # id(tensor) -> (weakref, kind now, birth)
        self.written: dict[int, Birth] = {}  # storage -> the birth an in-place op wrote there (``buffer.data.copy_``)
        self._nodes: dict[Any, tuple[str | None, str | None, str, SourceLine | None]] = {}
        self._tagged: set[Any] = set()  # nodes recorded from a module's output (``_tag``), not by a tracked op
        self._fed_nodes: dict[Any, Birth] = {}  # nodes of an op given a NaN/Inf (``_fed``): their NaN goes back to it
        self._finite_inputs: set[tuple[int, int]] = set()  # (id, version) of the step's tensors read finite
        self._handles: list[Any] = []
        self._busy = False  # our own checks must not be tracked as the user's ops
        self.broken = False  # an internal failure: localization falls back to module hooks
        self.python = PythonBackwards(self, python_backwards)  # this mode, pushed inside custom Functions' backwards

    # ------------------------------------------------------------ set-up from localize
    def add_inputs(self, obj: Any) -> None:
        """Tensors handed to the step or to the model: their non-finite values are the batch's fault."""
        self.inputs.update(id(t) for t in op_tensors(obj))

    def enter(self, module: torch.nn.Module) -> None:
        self.stack.append(module)
        self._entries.append(next_sequence_nr())

    def leave(self, module: torch.nn.Module, output: Any, inputs: Any = None) -> None:
        """``module``'s forward returned ``output`` from ``inputs``: autograd nodes behind it that no tracked op
        made (a custom ``autograd.Function``) were made by this module's own code."""
        if self.stack and self.stack[-1] is module:
            self.stack.pop()
            self._entries.pop()
        if not self.stack and self.names.get(id(module)) == "":
            self.model_done = True
        if not self.broken:
            self._guarded(lambda: self._tag(module, output, inputs))

    def _tag(self, module: torch.nn.Module, output: Any, inputs: Any) -> None:
        """Record as ``module``'s the nodes its forward made that no tracked op recorded: walking back from its
        output through the nodes made after its inputs' (older ones were there before it ran), and through the
        ones its submodules tagged. Every op of a block that a reentrant checkpoint re-runs inside backward() is
        such a node (the tracker does not see ops there): a ``sqrt`` between two submodules is the block's."""
        todo = [t.grad_fn for t in op_tensors(output) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        if all(n in self._nodes and n not in self._tagged for n in todo):
            return  # made by tracked ops, recorded with what is behind them: the common case, no walk of the inputs
        floor = max((sequence_nr(t.grad_fn) for t in op_tensors(inputs)
                     if isinstance(t, torch.Tensor) and t.grad_fn is not None), default=-1)
        origin = (self.names.get(id(module)), class_name(module), None, None)
        seen: set[Any] = set()
        while todo and len(seen) < MAX_NODES:
            n = todo.pop()
            if n is None or n in seen or sequence_nr(n) <= floor or type(n).__name__ == "AccumulateGrad":
                continue
            seen.add(n)
            if n not in self._nodes:
                self._note(n, origin)
                self._tagged.add(n)
            elif n not in self._tagged:
                continue  # recorded by a tracked op, with what is behind it
            todo.extend(m for m, _ in n.next_functions)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Within, torch calls are tensor_dap's own (the module hooks' checks), not the user's ops."""
        busy, self._busy = self._busy, True
        try:
            yield
        finally:
            self._busy = busy

    def close(self) -> None:
        self.python.unwind()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for kept in (self._nodes, self._tagged, self._fed_nodes, self._finite_inputs, self._lineage, self.written):
            kept.clear()

    # ------------------------------------------------------------ queries
    def lineage(self, t: Any) -> tuple[str, Birth] | None:
        entry = self._lineage.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1], entry[2]

    def verdict(self, obj: Any) -> tuple[bool, Birth | None]:
        """Does a non-finite value in ``obj`` (a module's output, the loss) matter, and where was it born?

        (False, None): finite, or only deliberate Infs (a -inf mask on its way); (True, birth):
        report it; (True, None): non-finite with no known lineage (an op this mode cannot see).
        """
        unknown = False
        for t in op_tensors(obj):
            kind = kind_of(t)
            if kind is None:
                continue
            known = self.lineage(t)
            if known is None:
                unknown = True
                continue
            first = root(known[1])
            if first.deliberate and kind == "inf":
                continue
            return True, first
        return unknown, None

    # ------------------------------------------------------------ the mode
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        raw = getattr(func, "__name__", "")
        if self._busy or self.broken or raw == "__get__":
            return func(*args, **kwargs)
        name = op_name(func)
        if raw == "register_hook" and len(args) == 2:  # the program's hook on a tensor: run with this mode on
            args = (args[0], self.python.wrap_hook(args[1], *self._module(), user_line(sys._getframe())))
        if name in _BACKWARD:
            loss = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
            birth = self._guarded(lambda: self._loss_birth(loss))
            if birth is not None:
                raise Born(birth)
            depth = self.python.pushed  # (a backward() inside a custom Function's: a reentrant checkpoint's)
            try:
                return as_called.call(func, args, kwargs)
            finally:
                self.python.unwind(depth)  # a custom Function's backward raised between its hooks
        before = None
        if inplace(raw) and args and isinstance(args[0], torch.Tensor):
            target = args[0]  # its state before the op is gone after it
            before = self._guarded(lambda: (target, self._input_kind(target)))
        out = as_called.call(func, args, kwargs)
        self._guarded(lambda: self._after(name, args, kwargs, out, before))
        return out

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        self._busy = True
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - our failure must not change the user's step
            self.broken = True
            log.debug("tensor_dap: op tracking stopped: %r", exc)
            return None
        finally:
            self._busy = False

    def _loss_birth(self, loss: Any) -> Birth | None:
        """``backward`` starts from a non-finite loss: the forward's trouble matters here, if not before."""
        matters, birth = self.verdict(loss)
        if not matters or birth is not None:
            return birth
        bad = next((t for t in op_tensors(loss) if kind_of(t) is not None), None)
        return Birth("loss", None, kind_of(bad) or "nan", line=user_line(sys._getframe()), inputs=[("loss", bad)],
                     output=bad, note="backward() starts from a non-finite loss that no tracked op produced")

    def _input_kind(self, t: Any) -> tuple[str, Birth | None] | None:
        """(kind, birth) of a non-finite argument; the birth is None when it came from outside the step's ops."""
        if not isinstance(t, torch.Tensor):
            return None
        known = self.lineage(t)
        if known is not None:
            return known
        kind = kind_of(t)
        return (kind, None) if kind is not None else None

    def _after(self, name: str, args: Any, kwargs: Any, out: Any, before: Any) -> None:
        outs = [t for t in op_tensors(out) if isinstance(t, torch.Tensor)]
        if before is not None and not any(t is before[0] for t in outs):
            outs.append(before[0])  # x[i] = v returns None: the target is the output
        origin, fed = None, None
        for t in outs:
            if t.requires_grad and t.grad_fn is not None and t.grad_fn not in self._nodes:
                if origin is None:
                    origin, fed = self._origin(name), self._fed(name, args, kwargs)
                self._record(t.grad_fn, origin, fed)
        for t in outs:
            kind = kind_of(t)
            if kind is None:
                self._lineage.pop(id(t), None)
                continue
            birth = self._classify(name, kind, t, args, kwargs, before)
            self._lineage[id(t)] = (weakref.ref(t), kind, birth)
            if before is not None and t is before[0] and (memory := storage_of(t)) is not None:
                self.written[memory] = birth
        for t in running_stats(name, args, kwargs):  # the op wrote them: a birth of its own, from its input alone
            if (memory := storage_of(t)) is not None and memory not in self.written and (kind := kind_of(t)):
                self.written[memory] = self._classify(name, kind, t, args[:1], {}, None)

    def _classify(self, name: str, kind: str, out: torch.Tensor, args: Any, kwargs: Any, before: Any) -> Birth:
        """The birth ``out`` descends from: an input's (propagated) or a new one made by this op."""
        seen: list[tuple[str, Birth | None, torch.Tensor]] = []
        for t in op_tensors((args, kwargs)):
            found = before[1] if before is not None and t is before[0] else self._input_kind(t)
            if found is not None:
                seen.append((found[0], found[1], t))
        scalar = scalar_kind(args, kwargs) is not None
        cause = None
        for in_kind, birth, t in seen:
            if in_kind == "nan" or kind == "inf":  # NaN from a NaN, Inf from a non-finite: passed on
                passed = birth or self._external(name, in_kind, t)
                if not (kind == "inf" and scalar and passed.deliberate):
                    return passed
                cause = passed  # a second mask on a masked tensor (causal, then padding): its line is told too
                break
        else:
            if seen:  # a NaN made from Infs: e.g. softmax over a row that is entirely -inf
                in_kind, birth, t = seen[0]
                cause = birth or self._external(name, in_kind, t)
        path, typ = self._module()
        first = next(iter(op_tensors((args, kwargs))), None)
        return Birth(self._phase(), name, kind, path, typ, user_line(sys._getframe()),
                     inputs=self._named_inputs(args, kwargs), output=out, cause=cause,
                     deliberate=scalar if cause is None else scalar and kind == "inf" and cause.deliberate,
                     made_by=producers(getattr(first, "grad_fn", None)))

    def _module(self) -> tuple[str | None, str | None]:
        module = self.stack[-1] if self.stack else None
        if module is None:
            return None, None
        top, frame = self.names.get(id(module)), user_frame(sys._getframe(1))
        owner = frame.f_locals.get("self") if frame is not None else None  # a submodule's forward called directly
        path = self.names.get(id(owner))  # (``flow.forward(x)``: nn.Module's call and its hooks skipped): the method's
        if path and top is not None and (top == "" or path.startswith(f"{top}.")):
            return path, class_name(owner)
        return top, class_name(module)

    def _phase(self) -> str:
        return "forward" if self.stack or not self.model_done else "loss"

    def _external(self, name: str, kind: str, t: torch.Tensor) -> Birth:
        """A non-finite tensor no tracked op made: the batch (phase input), or state from before the step."""
        path, typ = self._module()
        line = user_line(sys._getframe())
        if id(t) in self.inputs:
            birth = Birth("input", name, kind, path, typ, line, inputs=[("input", t)], output=t,
                          note=with_rows("the batch handed to the step is already non-finite", t))
        else:  # a buffer or constant: an Inf there is a mask put on purpose; a NaN is not
            birth = Birth(self._phase(), name, kind, path, typ, line, inputs=[("input", t)], output=t,
                          deliberate=kind == "inf",
                          note="one of its inputs was non-finite before the step began (a buffer or constant)")
        self._lineage[id(t)] = (weakref.ref(t), kind, birth)
        return birth

    @staticmethod
    def _named_inputs(args: Any, kwargs: Any) -> list[tuple[str, Any]]:
        named = [(f"args[{i}]", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        named += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        return named[:8]

    # ------------------------------------------------------------ autograd nodes
    def _origin(self, name: str) -> tuple[str | None, str | None, str, SourceLine | None]:
        path, typ = self._module()
        return path, typ, name, user_line(sys._getframe())

    def _fed(self, name: str, args: Any, kwargs: Any) -> Birth | None:
        """The accidental NaN/Inf among an op's inputs, whatever its output: an op that saturates on it (an LSTM's
        gates on an Inf in the batch) stays finite in the forward, and its backward makes NaN from it there."""
        for t in op_tensors((args, kwargs)):
            known = self.lineage(t)
            if known is not None:
                first = root(known[1])
            elif id(t) in self.inputs and (id(t), t._version) not in self._finite_inputs:
                kind = kind_of(t)  # (a finite batch is read once, not again by each op that takes it)
                if kind is None:
                    self._finite_inputs.add((id(t), t._version))
                    continue
                first = self._external(name, kind, t)
            else:
                continue
            if not first.deliberate:
                return first
        return None

    def _record(self, node: Any, origin: tuple[str | None, str | None, str | None, SourceLine | None],
                fed: Birth | None = None) -> None:
        """Remember ``node`` and the nodes behind it that no tracked op made (the inside of a composite op,
        a custom ``autograd.Function``): their op is named after the node, their line read from anomaly
        mode's record of the forward stack. ``fed``: the non-finite input the op was given (``_fed``)."""
        todo, count = [node], 0
        while todo and count < MAX_NODES:
            n = todo.pop()
            if n is None or n in self._nodes or type(n).__name__ == "AccumulateGrad":
                continue
            count += 1
            if fed is not None:
                self._fed_nodes[n] = fed
            if n is node and origin[2] is not None:
                self._nodes[n] = origin
                self._handles.append(n.register_hook(self._node_hook(n)))
            else:
                self._note(n, origin if n is node else self._maker(n, origin))
            todo.extend(m for m, _ in n.next_functions)

    def _maker(self, n: Any, origin: tuple[str | None, str | None, str | None, SourceLine | None]
               ) -> tuple[str | None, str | None, str | None, SourceLine | None]:
        """Whose code made ``n``, a node behind the op recorded now that no tracked op made (a custom
        ``autograd.Function``): the innermost module already running when it was made. A ``SafeLog.apply(h)`` in the
        model's own forward, fed to ``self.fc2``, is the model's, not fc2's (fc2's op came across it first)."""
        made, entries = sequence_nr(n), self._entries
        if not entries or entries[-1] <= made:
            return origin  # made inside the module running now
        for i in range(len(entries) - 2, -1, -1):
            if entries[i] <= made:
                module = self.stack[i]
                return self.names.get(id(module)), class_name(module), None, None
        return None, None, None, None  # made before the model's forward: outside any module

    def _note(self, n: Any, origin: tuple[str | None, str | None, str | None, SourceLine | None]) -> None:
        """A node no tracked op made: its op named after the node, its line read from anomaly mode's record."""
        self._nodes[n] = (origin[0], origin[1], forward_name(n.name()), anomaly_line(n) or origin[3])
        if written_in_python(n):  # its ops are seen too: the line in its backward that made a NaN is the user's
            self._handles.append(n.register_prehook(self.python.enter))
        self._handles.append(n.register_hook(self._node_hook(n)))

    def _node_hook(self, node: Any) -> Callable[..., None]:
        python = written_in_python(node)

        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if python:
                self.python.leave()
            if self.broken:
                return
            birth = self._guarded(lambda: self._backward_birth(node, grad_inputs, grad_outputs))
            if birth is not None:
                raise Born(birth)
        return hook

    def _backward_birth(self, node: Any, grad_inputs: Any, grad_outputs: Any) -> Birth | None:
        kinds = [k for g in grad_inputs if (k := kind_of(g)) is not None]
        if not kinds or any(kind_of(g) is not None for g in grad_outputs):
            return None  # finite, or only passing on a non-finite gradient it received
        path, typ, forward_op, line = self._nodes.get(node, (None, None, None, None))
        fed = self._fed_nodes.get(node)
        if fed is not None:  # the NaN/Inf the forward was given, not this backward, is the cause
            said = f"{fed.note}; " if fed.note else ""
            where = f" at {line}" if line else ""
            op = forward_op or "?" if path is None else f"{forward_op or '?'} in {module_label(path)}"
            return replace(fed, note=f"{said}{op} stayed finite on it, and its backward {node.name()}{where} made "
                                     f"{'NaN' if 'nan' in kinds else 'Inf'} from it")
        named_in = [(f"grad_output[{i}]", g) for i, g in enumerate(grad_outputs) if isinstance(g, torch.Tensor)]
        named_out = [g for g in grad_inputs if isinstance(g, torch.Tensor)]
        inside = next((root(known[1]) for g in named_out if (known := self.lineage(g)) is not None),
                      None) if written_in_python(node) else None  # (only a backward written in Python has ops seen)
        return Birth("backward", node.name(), "nan" if "nan" in kinds else "inf", path, typ, line,
                     forward_op=forward_op, inputs=named_in[:8], made_by=producers(first_input(node)),
                     output=named_out[0] if len(named_out) == 1 else tuple(named_out[:8]), saved=saved_values(node),
                     inside=inside)
