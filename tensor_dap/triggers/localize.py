"""Find where a NaN/Inf was born, by re-running one step with every op and module watched.

The sentinel in ``watch`` only says *that* something went non-finite; this module says *where*. It runs only after
the sentinel fired, so it may be slow and thorough: ``origin``'s tracker follows every op of the forward and every
autograd node of the backward, and hooks on every module tell it which module's own code is running. The re-run
stops at the first non-finite value that matters (a module's output, the loss, a gradient) and names the op, the
innermost module and the user's line where it was born. Where the tracker cannot see (an op outside torch's Python
API), the module hooks still name the first module, exactly as a hook left on every module for the whole run would
have: forward hooks, full backward hooks (tensor hooks when a model's in-place ops forbid them) and a hook on every
parameter's gradient."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable

import torch

from ..debug.frames import SourceLine
from ..dynamo import run_eagerly
from ..errors import STOPS
from ..kinds import class_name
from ..nested import walk
from ..summary import TensorSummary, describe
from ..summary.rows import masked_rows_text, with_rows
from .loss_tap import double_backward_line
from .birth import Birth, Born, masks, module_label, op_at, outlive_transforms, root
from .finite import kind_of
from .ops import is_node_name
from .masked_rows import ROW_OPS
from .origin import GRAD_AT_OUTPUTS, Tracker

MAX_ROWS = 8  # tensors listed per report section

NOT_LOCAL = ("this rank's own step is finite when re-run alone: the non-finite gradient arrived through "
             "the all-reduce from another rank (see its report); ")
NOT_REPRODUCED = "the re-run did not reproduce it (a nondeterministic step?); "


def not_reproduced(loop: bool) -> str:
    """Why a re-run of an unchanged loop's step (``loop``) found nothing: a gradient penalty, if the program takes
    gradients of gradients (its double backward is not re-run: only the model's forwards and backward are)."""
    line = double_backward_line() if loop else None
    if line is None:
        return NOT_REPRODUCED
    return (f"the re-run did not reproduce it: the program takes gradients of gradients (torch.autograd.grad with "
            f"create_graph=True at {os.path.basename(line.file)}:{line.line}: a gradient penalty), whose backward "
            "the unchanged loop does not re-run; hand the step to watch.step to localize it; ")


@dataclass
class Finding:
    """Where the first non-finite value appeared, with live references for the debugger."""

    phase: str  # "input", "forward", "backward", "optimizer"
    module: str | None  # full dotted path, "" for the root, None when no module is involved
    module_type: str | None
    note: str
    tensors: list[tuple[str, str, TensorSummary]] = field(default_factory=list)
    culprit: dict[str, Any] = field(default_factory=dict)  # module, inputs, output, grad_input, ...
    birth: Birth | None = None  # the op where it was born, when the re-run's tracker saw it
    # phase "optimizer": what wrote the non-finite parameter: "update" (the last one), "before watch" (it was so
    # before any watched update), "outside" (code between steps: ``param_writer``); phase "backward": "program" for
    # a gradient the program set itself from a torch.func transform
    writer: str = "update"
    diagnosis: str | None = None  # known from the finding itself (``param_writer``): over the rules' guess

    @property
    def op(self) -> str | None:
        return self.birth.op if self.birth is not None else None

    @property
    def line(self) -> SourceLine | None:
        return self.birth.line if self.birth is not None else None

    @property
    def headline(self) -> str:
        name = module_label(self.module or "", self.module_type)
        birth = self.birth
        if birth is not None and birth.op:
            what = "NaN" if birth.kind == "nan" else "Inf"
            op = f"{birth.op} (the backward of {birth.forward_op})" if birth.forward_op else birth.op
            if self.phase == "input":
                return f"non-finite input batch, first used by {op} in {name}" if self.module is not None \
                    else f"non-finite input with no gradient (the batch, or computed from it), first used by {op}"
            place = f"in the {self.phase} of {name}" if self.module is not None else "outside any module"
            return f"{what} born in {op}, {place}"
        if self.phase == "input":
            return f"non-finite input batch, first seen by {name}"
        if self.phase == "optimizer":
            if self.writer == "before watch":
                return f"a parameter of {name} was non-finite before the first watched step"
            if self.writer == "outside":
                return f"a parameter of {name} went non-finite after the update, outside the optimizer"
            return f"the optimizer update made a parameter of {name} non-finite"
        if self.phase == "loss":
            if birth is not None and birth.inputs and birth.inputs[0][0] == GRAD_AT_OUTPUTS:  # the loss was finite
                return f"{'NaN' if birth.kind == 'nan' else 'Inf'} in the gradient the loss sent to the model's outputs"
            return "non-finite loss"
        if self.writer == "program":
            return f"non-finite gradient of {name}, set by the program with no backward()"
        return f"first non-finite value in the {self.phase} of {name}"


class _Found(Exception):
    """Raised from a hook to stop the re-run at the first non-finite tensor."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.note)
        self.finding = finding


class StopRerun(Exception):
    """Raised by the optimizer hook during a re-run: the update itself is never re-run."""


def tensors_in(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor inside nested containers (a lone tensor is named ``prefix`` or "tensor")."""
    if isinstance(obj, torch.Tensor):
        return iter([(prefix or "tensor", obj)])
    return walk(obj, prefix)


def nonfinite(t: Any) -> bool:
    """True when a floating/complex tensor (sparse: its stored values) holds a NaN or Inf (one host read)."""
    return kind_of(t) is not None


def any_nonfinite(obj: Any) -> bool:
    return any(nonfinite(t) for _, t in tensors_in(obj))


def _rows(section: str, obj: Any, prefix: str) -> list[tuple[str, str, TensorSummary]]:
    return [(section, name, describe(t)) for name, t in islice(tensors_in(obj, prefix), MAX_ROWS)]


def param_rows(module: torch.nn.Module) -> list[tuple[str, str, TensorSummary]]:
    """The first ``MAX_ROWS`` parameters (and their gradients); the section says so when there are more."""
    named = list(islice(module.named_parameters(), MAX_ROWS))
    total = len(named) if len(named) < MAX_ROWS else sum(1 for _ in module.parameters())
    of = f" (the first {len(named)} of {total})" if total > len(named) else ""
    return [(f"parameters{of}", name, describe(p, grad=False)) for name, p in named] + \
        [(f"gradients{of}", name, describe(p.grad)) for name, p in named if p.grad is not None]


def _owners(model: torch.nn.Module) -> dict[int, tuple[str, torch.nn.Module, str]]:
    """id(parameter) -> (module path, module, parameter name) for the module that holds it directly."""
    owners: dict[int, tuple[str, torch.nn.Module, str]] = {}
    for path, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            owners.setdefault(id(p), (path, mod, pname))
    return owners


def from_birth(birth: Birth, model: torch.nn.Module | None, seen_at: str | None = None) -> Finding:
    """A finding for the op where a non-finite value was born (``seen_at``: the module whose output showed it)."""
    module = _submodule(model, birth.module)
    what = "NaN" if birth.kind == "nan" else "Inf"
    if birth.note:
        note = birth.note
    elif birth.phase == "backward":
        note = f"{birth.op} turned finite gradients into {what} (the backward of {birth.forward_op or '?'})"
        if birth.inside is not None:  # a backward the program wrote: the op in it
            note += f"; in that backward, {op_at(birth.inside)}"
    elif birth.cause is not None:
        note = f"{birth.op} made NaN from inputs holding Inf (from {masks(birth.cause)})"
        rows = masked_rows_text(birth.inputs[0][1]) if birth.inputs and birth.op in ROW_OPS else ""
        note += f"; {rows}" if rows else ""
    else:
        note = with_rows(f"{birth.op} made {what} from finite inputs", birth.output)  # which samples of a batch
    if seen_at is not None and seen_at != birth.module:
        note += f"; first seen at the output of {module_label(seen_at)}"
    node = birth.phase == "backward" and is_node_name(birth.op)  # (not an op of the program's own gradient hook)
    out_section, in_section = ("grad_input", "grad_output") if node else ("op output", "op inputs")
    rows = [(in_section, name, describe(t)) for name, t in birth.inputs[:MAX_ROWS] if isinstance(t, torch.Tensor)]
    if not any(birth.output is t for _, t in birth.inputs):  # a batch or buffer that came in non-finite: no output
        rows += _rows(out_section, birth.output, "output")
    if module is not None:
        rows += param_rows(module)
    outlive_transforms(birth)  # (the rows above tell vmap's samples apart; what reads values later needs them plain)
    culprit = {"module": module, "inputs": [t for _, t in birth.inputs], "output": birth.output}
    if node:
        culprit.update(grad_output=culprit["inputs"], grad_input=birth.output)
    return Finding(birth.phase, birth.module, birth.module_type, note, rows, culprit, birth)


def _submodule(model: torch.nn.Module | None, path: str | None) -> torch.nn.Module | None:
    if path is None or model is None:  # no model: a birth in the loss computation (``break_if``)
        return None
    try:
        return model.get_submodule(path) if path else model
    except (AttributeError, RuntimeError):  # (a ScriptModule has no get_submodule)
        return None


def _root_hooks(model: torch.nn.Module, enter: Callable, leave: Callable) -> list[Any]:
    """``enter``/``leave`` around ``model``'s own calls, by torch's hooks on all modules (a ScriptModule takes none)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    def before(module: torch.nn.Module, args: Any) -> None:
        if module is model:
            enter(module, args, {})

    def after(module: torch.nn.Module, args: Any, output: Any) -> None:
        if module is model:
            leave(module, args, {}, output)

    return [register_module_forward_pre_hook(before), register_module_forward_hook(after)]


class _Hooks:
    """Hooks on every module and parameter; the first non-finite value that matters raises ``_Found``."""

    def __init__(self, model: torch.nn.Module, input_bad: bool, full_backward: bool, tracker: Tracker) -> None:
        self.model = model
        self.input_bad = input_bad
        self.full_backward = full_backward
        self.tracker = tracker
        self.last: dict[int, tuple[Any, Any, Any]] = {}  # id(module) -> (args, kwargs, output)
        self.handles: list[Any] = []
        self.owners = _owners(model)
        if isinstance(model, torch.jit.ScriptModule):  # scripted whole: torch's global hooks see its calls from Python
            self.handles += _root_hooks(model, self._enter(""), self._forward(""))
        for path, mod in model.named_modules():
            if isinstance(mod, torch.jit.ScriptModule):  # TorchScript takes no module hooks: its ops are seen, as
                continue  # the nearest Python module's (its parameters' gradients are still hooked below)
            self.handles += tracker.python.module_hooks(mod, path)  # the program's backward hooks: their ops seen
            self.handles.append(mod.register_forward_pre_hook(self._enter(path), with_kwargs=True))
            self.handles.append(mod.register_forward_hook(self._forward(path), with_kwargs=True))
            if full_backward:
                self.handles.append(mod.register_full_backward_hook(self._backward(path)))
        for p in model.parameters():
            if p.requires_grad:
                first = tracker.python.before_hooks(p)  # the program's own hooks on it: their ops are seen
                self.handles += [first] if first is not None else []
                self.handles.append(p.register_hook(self._param_grad(p, first is not None)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.last.clear()

    def _enter(self, path: str) -> Callable:
        def hook(mod: torch.nn.Module, args: Any, kwargs: Any) -> None:
            if path == "":
                self.tracker.add_inputs((args, kwargs))
            self.tracker.enter(mod)
        return hook

    def _forward(self, path: str) -> Callable:
        def hook(mod: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            self.tracker.leave(mod, output, (args, kwargs))
            with self.tracker.quiet():
                self._check_output(path, mod, args, kwargs, output)
        return hook

    def _check_output(self, path: str, mod: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        self.last[id(mod)] = (args, kwargs, output)
        if not self.full_backward:
            for _, t in tensors_in(output):
                if t.requires_grad:
                    t.register_hook(self._output_grad(path, mod))
        if not any_nonfinite(output):
            return
        matters, birth = (True, None) if self.tracker.broken else self.tracker.verdict(output)
        if not matters:
            return  # only a deliberate -inf (a mask) on its way
        if birth is not None:
            raise _Found(from_birth(birth, self.model, seen_at=path))
        fed = any_nonfinite((args, kwargs))
        phase = "input" if fed and self.input_bad else "forward"
        if phase == "input":
            note = with_rows("the batch handed to the step is non-finite; this is the first module that received it",
                             *(t for _, t in tensors_in((args, kwargs))))
        elif fed:
            note = "its inputs were already non-finite (produced by code outside any module)"
        else:
            note = "its output is non-finite while its inputs are finite"
        rows = _rows("inputs", (args, kwargs) if kwargs else args, "args") + \
            _rows("output", output, "output") + param_rows(mod)
        raise _Found(Finding(phase, path, class_name(mod), note, rows,
                             {"module": mod, "inputs": args, "output": output}))

    def _culprit(self, mod: torch.nn.Module, **extra: Any) -> dict[str, Any]:
        args, _, output = self.last.get(id(mod), (None, None, None))
        return {"module": mod, "inputs": args, "output": output, **extra}

    def _backward(self, path: str) -> Callable:
        def hook(mod: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
            out_bad, in_bad = any_nonfinite(grad_output), any_nonfinite(grad_input)
            if not (out_bad or in_bad):
                return
            if out_bad:
                note = "the gradient arriving at its output is already non-finite (from code outside any module)"
            else:
                note = "its backward turned a finite output gradient into a non-finite input gradient"
            args, _, output = self.last.get(id(mod), (None, None, None))
            rows = _rows("grad_output", grad_output, "grad_output") + \
                _rows("grad_input", grad_input, "grad_input") + _rows("forward inputs", args, "args") + \
                _rows("forward output", output, "output") + param_rows(mod)
            raise _Found(Finding("backward", path, class_name(mod), note, rows,
                                 self._culprit(mod, grad_input=grad_input, grad_output=grad_output)))
        return hook

    def _output_grad(self, path: str, mod: torch.nn.Module) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            if nonfinite(grad):
                note = ("the gradient arriving at its output is non-finite; the module that consumed "
                        "this output produced it (tensor hooks: the model's in-place ops rule out module "
                        "backward hooks)")
                raise _Found(Finding("backward", path, class_name(mod), note,
                                     _rows("grad_output", grad, "grad_output") + param_rows(mod),
                                     self._culprit(mod, grad_output=grad)))
        return hook

    def _param_grad(self, p: torch.nn.Parameter, hooked: bool) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            arrived = self.tracker.python.after_hooks(p) if hooked else False  # finite, before the program's hooks
            if nonfinite(grad):
                path, mod, pname = self.owners.get(id(p), ("", self.model, "?"))
                if arrived:
                    raise Born(self.tracker.python.hook_birth(list(p._backward_hooks.values()), grad, path,
                                                              class_name(mod), f"on its parameter {pname!r}"))
                note = f"the gradient of its parameter {pname!r} is non-finite"
                raise _Found(Finding("backward", path, class_name(mod), note,
                                     _rows("gradient", grad, pname) + param_rows(mod),
                                     self._culprit(mod, parameter=p, grad=grad)))
        return hook


def localize_rerun(model: torch.nn.Module, rerun: Callable[[], Any], *, input_bad: bool,
                   reset: Callable[[], None], inputs: Any = None,
                   leftover: Callable[[Tracker], Finding | None] | None = None) -> Finding | None:
    """Re-run the step with every op and module watched; None when it completes without a non-finite value.

    ``reset`` puts the captured pre-step state back before each attempt (another when the model's in-place ops
    forbid module backward hooks, or a custom backward fails under the op tracker). ``inputs``: the step's arguments.
    ``leftover``: asked when the re-run ends with no non-finite loss or gradient (what else the tracker saw made).
    """
    attempts = [(True, True)]  # (module backward hooks, the ops inside custom Functions' backwards seen)
    while attempts:
        full_backward, inside = attempts.pop()
        reset()
        tracker = Tracker(model, inside)
        tracker.add_inputs(inputs)
        hooks = _Hooks(model, input_bad, full_backward, tracker)
        try:
            # anomaly mode records each node's forward stack: the line of a node no tracked op made
            with tracker, torch.autograd.set_detect_anomaly(True, check_nan=False), run_eagerly():
                rerun()
            return leftover(tracker) if leftover is not None else None
        except _Found as exc:
            return exc.finding
        except Born as exc:
            return from_birth(exc.birth, model)
        except StopRerun:  # the update came with no non-finite value seen on the way
            return _set_by_hand(tracker, model) or (leftover(tracker) if leftover is not None else None)
        except Exception as exc:
            if full_backward and isinstance(exc, (RuntimeError, NotImplementedError)) and _backward_hooks_failed(exc):
                attempts.append((False, inside))  # in-place ops on module outputs, a sparse argument: tensor hooks
            elif tracker.python.entered and not isinstance(exc, STOPS):  # a custom backward refusing our mode
                attempts.append((full_backward, False))
            else:
                raise
            continue
        finally:
            hooks.remove()
            tracker.close()
    return None


def _set_by_hand(tracker: Tracker, model: torch.nn.Module) -> Finding | None:
    """A non-finite gradient at the update that a tracked op made: the program computed it and set ``.grad`` itself
    (torch.func's per-sample gradients, clipped and noised: DP-SGD), where no backward() ran to be watched. Its
    birth is told even where it was an Inf that looked deliberate (a division by 0 of a scalar): it reached a
    gradient."""
    for p in model.parameters():
        known = tracker.lineage(p.grad) if p.grad is not None else None
        if known is not None:
            return from_birth(root(known[1]), model)
    return None


def _backward_hooks_failed(exc: BaseException) -> bool:
    """The module backward hooks could not wrap a module's arguments or outputs: torch names them for an in-place
    op on an output; a sparse argument fails in their set-up (``aten::view`` has no sparse kernel)."""
    if "BackwardHook" in str(exc):
        return True
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in ("setup_input_hook", "setup_output_hook") and code.co_filename.endswith("hooks.py"):
            return True
        tb = tb.tb_next
    return False
