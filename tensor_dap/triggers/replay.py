"""``replay``: restore an incident bundle and run its step again, under hooks and ``detect_anomaly``.

The bundle holds everything the step depended on (its arguments, the model and optimizer
state from before it, every RNG state), so the failure reproduces deterministically and
stops in the debugger the same way the original trigger would have. The model is left in
the restored pre-step state: the failing update is not applied.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any, Callable

import torch

from ..dist import current_rank, unwrap
from ..errors import NonFiniteError
from ..format import first_line
from ..nested import map_tensors
from ..state import restore_rng
from .incident import Bundle, read_bundle
from .localize import StopRerun, any_nonfinite, localize_rerun, nonfinite_parameters
from .report import Report
from .stop import check_mode, dispatch


def _restore(bundle: Bundle, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    if bundle.model_state is not None:
        unwrap(model).load_state_dict(bundle.model_state)
    if optimizer is not None and bundle.optimizer_state is not None:
        optimizer.load_state_dict(bundle.optimizer_state)
    if bundle.rng is not None:
        restore_rng(bundle.rng)


def replay(bundle: str | Bundle, model: torch.nn.Module, step_fn: Callable[..., Any],
           optimizer: torch.optim.Optimizer | None = None, *, on: str = "auto",
           ranks: Collection[int] | None = None) -> Report | None:
    """Re-run the bundle's step on ``model``; returns the new report, or None if the step ran clean.

    ``step_fn`` is the same step function handed to ``watch.step``: it is called with the
    bundle's saved arguments (moved to the model's device). The report then goes where
    ``on`` says (stop in the debugger, raise ``NonFiniteError``, or log).
    """
    check_mode(on)
    if isinstance(bundle, str):
        bundle = read_bundle(bundle)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    args, kwargs = map_tensors((bundle.args, bundle.kwargs), lambda t: t.to(device))
    guard = _UpdateGuard(optimizer)

    def reset() -> None:
        _restore(bundle, model, optimizer)
        for p in model.parameters():
            p.grad = None

    def run() -> Any:
        return step_fn(*args, **kwargs)

    try:
        reset()
        finding = nonfinite_parameters(unwrap(model))
        if finding is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                finding = localize_rerun(unwrap(model), run, input_bad=any_nonfinite((args, kwargs)), reset=reset)
        anomaly = _anomaly_trace(run, reset) if finding is not None and finding.phase == "backward" else None
    finally:
        guard.remove()
        reset()  # leave the model as the bundle had it, before the failing step
    if finding is None:
        return None
    report = Report(kind="nonfinite", headline=f"replay: {bundle.report.headline}",
                    step=bundle.step, phase=finding.phase, module=finding.module, module_type=finding.module_type,
                    rank=current_rank(), notes=[finding.note], tensors=list(finding.tensors), bundle=bundle.path)
    if (finding.phase, finding.module) != (bundle.report.phase, bundle.report.module):
        report.notes.append(f"the original report said {bundle.report.where or 'something else'}")
    if anomaly:
        report.notes.append("detect_anomaly: " + anomaly)
    dispatch(report, on=on, error=NonFiniteError, ranks=ranks, culprit={**finding.culprit, "step": bundle.step})
    return report


def _anomaly_trace(run: Callable[[], Any], reset: Callable[[], None]) -> str | None:
    """Run once more under ``detect_anomaly``: its error names the autograd op that produced the NaN."""
    reset()
    try:
        with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly(check_nan=True):
            warnings.simplefilter("always")
            run()
    except StopRerun:
        return None
    except RuntimeError as exc:
        origin = _forward_origin(caught)
        return f"{first_line(exc)}{origin}"
    return None


def _forward_origin(caught: Any) -> str:
    """The user's line in the forward traceback that anomaly mode prints as a warning."""
    for w in caught:
        text = str(w.message)
        if "Traceback of forward call" in text:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("File ")]
            if lines:
                return f" (forward: {lines[-1]})"
    return ""


class _UpdateGuard:
    """While replaying, the optimizer update never runs: the first call to step() stops the re-run."""

    def __init__(self, optimizer: torch.optim.Optimizer | None) -> None:
        self.handle = optimizer.register_step_pre_hook(self._stop) if optimizer is not None else None

    @staticmethod
    def _stop(optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise StopRerun()

    def remove(self) -> None:
        if self.handle is not None:
            self.handle.remove()
