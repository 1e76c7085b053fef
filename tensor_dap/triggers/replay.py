"""``replay``: restore an incident bundle and run its step again, with every op and module watched.

The bundle holds everything the step depended on (its arguments, or for an unchanged loop the
model's own forwards and the gradients its outputs received, the model and optimizer state
from before it, every RNG state), so the failure reproduces deterministically and stops in
the debugger the same way the original trigger would have. The model is left in the restored
pre-step state: the failing update is not applied. ``state.pt`` is read with
``weights_only=True``; only ``trusted=True`` unpickles Python objects a bundle may also keep.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any, Callable

import torch

from ..debug.frames import SourceLine
from ..dist import unwrap
from ..errors import NonFiniteError
from ..nested import map_tensors
from ..state import load_model_state, restore_rng
from .buffer_writes import written
from .diagnose import diagnose_report
from .incident import Bundle, read_bundle
from .investigate import report_of
from .held_now import nonfinite_parameters
from .localize import Finding, StopRerun, any_nonfinite, localize_rerun
from .forwards import Forward, replay_forwards
from .parts import as_model
from .report import Report
from .stop import check_mode, dispatch, guarded


def _restore(bundle: Bundle, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    if bundle.model_state is not None:
        load_model_state(unwrap(model), bundle.model_state)
    if optimizer is not None and bundle.optimizer_state is not None:
        optimizer.load_state_dict(bundle.optimizer_state)
    if bundle.rng is not None:
        restore_rng(bundle.rng)


def replay(bundle: str | Bundle, model: torch.nn.Module | list | dict, step_fn: Callable[..., Any] | None = None,
           optimizer: torch.optim.Optimizer | None = None, *, on: str = "auto",
           ranks: Collection[int] | None = None, trusted: bool = False) -> Report | None:
    """Re-run the bundle's step on ``model``; returns the new report, or None if the step ran clean.

    A bundle from ``watch.step`` needs ``step_fn``, the same step function: it is called with
    the bundle's saved arguments (moved to the model's device); one of an unchanged loop whose optimizer
    steps with a closure (LBFGS) needs that closure. A bundle from an unchanged loop
    replays the model's own forwards and backwards and needs no step function. The report then
    goes where ``on`` says (stop in the debugger, raise ``NonFiniteError``, or log).
    ``trusted=True`` is needed for bundles that keep Python objects (``objects.pt``) or were
    written before tensor_dap stored bundles in safe types: unpickling them can run code.
    """
    check_mode(on)
    model = as_model(model)  # (a list of the modules one optimizer trains: ``parts``)
    if isinstance(bundle, str):
        bundle = read_bundle(bundle, trusted=trusted)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    inner = unwrap(model)
    if bundle.forwards:
        forwards = [_forward(f, device) for f in bundle.forwards]
        inputs: Any = [(f.args, f.kwargs) for f in forwards]

        def run() -> Any:
            return replay_forwards(inner, forwards)
    else:
        if step_fn is None and bundle.mode == "closure":
            raise ValueError(f"{bundle.path}: this bundle holds a step of an optimizer called with a closure (LBFGS): "
                             "pass the closure, tensor_dap.replay(bundle, model, closure, optimizer)")
        if step_fn is None:
            raise ValueError(f"{bundle.path}: this bundle holds a watch.step step: pass its step function, "
                             "tensor_dap.replay(bundle, model, step_fn, optimizer)")
        args, kwargs = map_tensors((bundle.args, bundle.kwargs), lambda t: t.to(device))
        inputs = (args, kwargs)

        def run() -> Any:
            return step_fn(*args, **kwargs)
    guard = _UpdateGuard(optimizer)

    def reset() -> None:
        _restore(bundle, model, optimizer)
        for p in model.parameters():
            p.grad = None

    try:
        reset()
        finding = nonfinite_parameters(inner, optimizer=optimizer)
        if finding is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                finding = localize_rerun(inner, run, input_bad=any_nonfinite(inputs), reset=reset, inputs=inputs,
                                         leftover=lambda t: guarded("tensor_dap.replay", written, t, inner))
    finally:
        guard.remove()
        reset()  # leave the model as the bundle had it, before the failing step
    if finding is None:
        return None
    report = report_of(finding, step=bundle.step, headline=f"replay: {bundle.report.headline}")
    report.bundle, report.mode = bundle.path, bundle.mode
    _carry_over(bundle.report, report, finding)
    if (report.phase, report.module, report.op) != (bundle.report.phase, bundle.report.module, bundle.report.op):
        report.notes.append(f"the original report said {bundle.report.where or 'something else'}"
                            + (f", {bundle.report.origin}" if bundle.report.origin else ""))
    dispatch(report, on=on, error=NonFiniteError, ranks=ranks, culprit={**finding.culprit, "step": bundle.step})
    return report


def _carry_over(original: Report, report: Report, finding: Finding) -> None:
    """What the re-run cannot know and the bundle's report does, of the same step: the losses before it, the
    learning rates (whose presence also says the replay call takes the optimizer), how the run clipped its gradients,
    and the diagnosis they allow; the names the program holds the model and optimizer by (its replay line: the
    program that replays is the one that ran)."""
    report.loss_history, report.lr, report.clipping = list(original.loss_history), list(original.lr), original.clipping
    report.names = dict(original.names)
    report.clip_norm_seen = original.clip_norm_seen
    if report.loss is None:
        report.loss = original.loss
    report.diagnosis = finding.diagnosis or diagnose_report(report, finding.birth) or report.diagnosis
    if report.phase == original.phase == "loss" and report.op is None and original.op:
        # A bundle of an unchanged loop keeps the number its loss function gave, not the function: the op that
        # made it non-finite is the one the run found (re-running the closure or the step function, or read from
        # the loss's graph).
        report.op, report.forward_op, report.source = original.op, original.forward_op, original.source
        report.notes[:1] = [LOSS_FROM_RUN]
        report.diagnosis = report.diagnosis or original.diagnosis


LOSS_FROM_RUN = ("the model's forwards and backward re-ran finite, and the loss handed to backward() was non-finite, "
                 "as in the run: its op and line are the run's (the bundle keeps the loss, not the loss function)")


def _forward(saved: dict[str, Any], device: torch.device) -> Forward:
    args, kwargs, grads = map_tensors((tuple(saved.get("args", ())), dict(saved.get("kwargs", {})),
                                       list(saved.get("grads", []))), lambda t: t.to(device))
    line, call = (where if isinstance(where, (list, tuple)) and len(where) == 3 else None
                  for where in (saved.get("line"), saved.get("call")))  # (bundles before Dec 2026 have no call)
    loss, entry = saved.get("loss"), saved.get("entry")  # (bundles before Dec 2026 have neither)
    f = Forward.saved(args, kwargs, dict(saved.get("rng") or {}), grads, SourceLine(*line) if line else None,
                      SourceLine(*call) if call else None, loss if isinstance(loss, (float, torch.Tensor)) else None)
    f.entry = entry if isinstance(entry, str) else None  # a part of a model with no forward of its own
    f.amp = tuple(tuple(map(str, region)) for region in saved.get("amp") or () if len(region) == 2)
    return f


class _UpdateGuard:
    """While replaying, the optimizer update never runs: the first call to step() stops the re-run.

    An optimizer stepping with a closure (LBFGS) computes its gradients inside step(): the
    closure runs once, watched, before the re-run stops.
    """

    def __init__(self, optimizer: torch.optim.Optimizer | None) -> None:
        self.handle = optimizer.register_step_pre_hook(self._stop) if optimizer is not None else None

    @staticmethod
    def _stop(optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args[0]: the optimizer
        if callable(closure):
            closure()
        raise StopRerun()

    def remove(self) -> None:
        if self.handle is not None:
            self.handle.remove()
