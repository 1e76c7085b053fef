"""The expensive half of ``watch``: once the sentinel fires, find where, report, bundle, stop.

Runs only when a read found a non-finite value (or a ``break_if`` inside the watch fired). It
confirms what is non-finite now, re-runs the failing step from its captured state with every
op and module watched (``localize``), fills the report (op, line, diagnosis, loss history,
learning rates, the largest magnitude), writes the bundle and sends the report where ``on``
says. Every re-run and replay puts gradients, buffers, RNG states (and a known GradScaler's
state) back, so training continues bit-identically.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any, Callable

import torch

from ..dist import current_rank
from ..errors import NonFiniteError, TriggerError
from ..format import short_error
from ..state import capture_rng, cloned, kept, load_optimizer_state, optimizer_kept, restore_rng, set_hyper
from ..summary import describe
from .birth import input_tensors
from .buffer_writes import Watched, deliberate, held, nonfinite_buffer, written
from .capture import Source, StepContext, Window
from .diagnose import diagnose_report
from .incident import safe_rng, write_bundle
from .localize import (
    NOT_LOCAL,
    Finding,
    any_nonfinite,
    localize_rerun,
    nonfinite,
    not_reproduced,
)
from .held_now import nonfinite_gradients, nonfinite_parameters
from .finite import max_abs
from .forwards import Forward
from .loop import FUNC_TRANSFORM
from .optimizer_call import learning_rates
from .replay_names import program_names
from .report import Report, source_field
from .stop import dispatch, guarded
from . import warned
from .upstream import upstream

log = logging.getLogger("tensor_dap.triggers")
OP_INPUTS = "the op's inputs"  # what a report's max |value| is of when an op overflowed from finite inputs


class Investigation:
    """Mixed into ``watch``: the state it reads is the watch's own (see watch.__init__)."""

    @property
    def _updater(self) -> Any:
        """The optimizer that updates the model: the one given, else the one found stepping (None before)."""
        return self.optimizer or self._stepper

    # ------------------------------------------------------------ sentinel → report
    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run our own code so that a failure of tensor_dap never breaks the training loop."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        return guarded("tensor_dap.watch", fn, *args)

    def _read_and_fire(self, index: int, ctx: StepContext | None) -> None:
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        first = self._sentinel.read()
        window, self._window = self._window or None, None
        if first is None:
            self._latched = False  # clean again: the next failure is news
            if ctx is not None and ctx.hyper is not None and ctx.checked and self._windowed():
                # Checked before the update: the state now is this step's pre-step state, and its
                # loss is not read yet. The next window starts here, so it covers that loss too.
                self._window = self._new_window(ctx.index)
                if isinstance(self._window, Window):
                    self._add_to_window(self._window, ctx)
            return
        if self._latched:
            self.suppressed += 1
            self._aftermath.again(index, self._sentinel.failing)
            return
        if ctx is None:  # an unchanged loop: its forwards, if this step's update has not run yet
            ctx = self._loop_context()
            ctx = ctx if ctx is not None and not ctx.updated else None
        report, culprit, source = self._investigate(first, index, ctx, window)
        if report is None:
            return
        self._latched = True
        self._aftermath.reported(report.step, self._sentinel.failing)
        if "aftermath_of" in culprit:  # another watch reported first and the run went on: one line, no stop
            self._aftermath.caused(report.step, *culprit["aftermath_of"])
            return
        self._finish(report, culprit, source or (Source(ctx.outer or ctx, None, None) if ctx is not None else None))

    def _finish(self, report: Report, culprit: dict[str, Any], source: Source | None,
                error: type[TriggerError] = NonFiniteError) -> None:
        """Bundle the step, keep the report, and send it where ``on`` says."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        report.notes.extend(warned.notes(self, report.step, report.phase))  # std() of one value: where a NaN came in
        self._bundle(report, source)
        if self.capture and source is None and report.bundle is None:
            dropped = self._loop.dropped if self._loop is not None else None  # the capture let this step go: why
            if dropped is None and self._loop is not None and not self._loop.forwards:
                dropped = ("no call of the watched model was seen in it: called as `model.forward(x)`? That skips "
                           "nn.Module's call, which the capture is in: write `model(x)`")
            elsewhere = "" if dropped == FUNC_TRANSFORM else ", or let the watched model run its forward in the step"
            report.notes.append(f"no bundle: this step cannot be re-run ({f'{dropped}; ' if dropped else ''}hand it "
                                f"to watch.step{elsewhere})")
        self.reports.append(report)
        dispatch(report, on=self.on, error=error, ranks=self.ranks, culprit=culprit)

    def _bundle(self, report: Report, source: Source | None) -> None:
        """The report's mode is the step it came from; that step is bundled when capturing."""
        if source is not None:
            report.mode = source.ctx.mode
            report.names = self._guard(program_names, (self.model, self._inner), self.optimizer or source.ctx.optimizer
                                       ) or {}
            if self.capture:
                self._write_bundle(report, source)

    def _investigate(self, first: int, index: int, ctx: StepContext | None, window: Window | None
                     ) -> tuple[Report | None, dict[str, Any], Source | None]:
        """Confirm exactly what is non-finite now, and localize it (re-running the step if needed)."""
        if first != index and window is not None and first >= window.start:
            try:
                found = self._localize_in_window(first, window)
            except Exception as exc:  # noqa: BLE001 - e.g. the step raised when replayed: localize as before
                log.warning("tensor_dap.watch: replaying steps %d-%d failed (%s: %s); localizing on step %d",
                            window.start, first, type(exc).__name__, exc, index)
                found = None
            if found is not None:
                finding, source = found
                return self._report(finding, first, index, window), {**finding.culprit, "step": first}, source
        grads_bad = any(nonfinite(p.grad) for p in self._params if p.grad is not None)
        loss_step, loss = self._last_loss
        loss_bad = loss is not None and loss_step >= first and nonfinite(loss)
        if not loss_bad and self._running_loss[0] == index and nonfinite(self._running_loss[1]):
            loss_step, loss = self._running_loss  # this step's loss, handed to backward() inside w.step
            loss_bad = True
        can_rerun = ctx is not None and ctx.index == index
        pre_update = ctx is None or ctx.checked  # else the step's own update already ran
        finding = nonfinite_parameters(self._inner, first_step=index == 0, optimizer=self._updater,
                                       checked=self.every == 1) if pre_update else None
        step = index
        if finding is not None:  # the update of the step before wrote it, unless there was none
            step = (index - 1 if self.every == 1 else first) if index > 0 else index
        elif grads_bad or (loss_bad and loss_step == index):
            failed = None
            try:
                finding = self._rerun(ctx) if can_rerun else None  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - the step raised when run again: report without the re-run
                finding, failed = None, f"re-running the step failed ({short_error(exc, limit=None)}); "
            finding = self._guard(upstream, self, finding) or finding
            if finding is None and grads_bad:
                finding = nonfinite_gradients(self._inner, rerun=can_rerun, func=self._loop is not None
                                              and self._loop.dropped == FUNC_TRANSFORM)
                if finding is not None and can_rerun:
                    finding.note = (failed or (NOT_LOCAL if current_rank() is not None
                                               else not_reproduced(ctx is not None and ctx.forwards is not None))) \
                        + finding.note
        elif not loss_bad and (finding := self._guard(self._buffer_finding, ctx, can_rerun)) is None:
            return None, {}, None  # the sum of norms overflowed, but every value is finite: no alarm
        if finding is None:
            step = loss_step
            finding = Finding("loss", None, None, "the loss is non-finite while every gradient and parameter "
                              "is finite: the loss computation overflowed, or a term no parameter depends on "
                              "is non-finite", [("loss", "loss", describe(loss))], {"loss": loss})
        report = self._report(finding, step, index, None, first=first)
        culprit = {**finding.culprit, "step": step}
        if loss_bad and step == loss_step:
            culprit.setdefault("loss", loss)  # tensor_dap.culprit().loss, whatever op the re-run named
        return report, culprit, None

    def _report(self, finding: Finding, step: int, index: int, window: Window | None, *,
                first: int | None = None, kind: str = "nonfinite", headline: str | None = None) -> Report:
        report = report_of(finding, step=step, kind=kind, headline=headline)
        self._enrich(report, finding)
        if window is not None:
            report.notes.append(f"the sentinel is read every {self.every} steps: detected at step {index}; "
                                f"step {step} was re-run from the state saved at the start of step {window.start}")
        elif self.every > 1 and first is not None and first != index:
            report.notes.append(f"the sentinel is read every {self.every} steps: first non-finite at step "
                                f"{first}, detected at step {index}, localized on the state of step {index} "
                                f"(no replay window: see WINDOW_BYTES in docs/triggers.md); use every=1 "
                                "for exact localization")
        elif step != index and first is not None:
            report.notes.append(f"detected at step {index}: the loss of a step is checked with the next "
                                "step's gradients")
        return report

    def _enrich(self, report: Report, finding: Finding | None) -> None:
        """Loss history, learning rates, the largest magnitude and a diagnosis: what tells a bug from a divergence."""
        report.loss_history = self._loss_history()
        if report.loss is None and report.loss_history:
            report.loss = report.loss_history[-1]
        optimizer = self._updater
        if optimizer is not None:
            report.lr = learning_rates(optimizer)
        if finding is not None or report.max_abs is None:  # (a break_if's report may know its op already)
            report.max_abs, report.max_abs_of = self._max_abs(finding)
        birth = finding.birth if finding is not None else None
        if finding is not None and finding.diagnosis:
            report.diagnosis = finding.diagnosis
        elif finding is not None or report.diagnosis is None:
            report.diagnosis = diagnose_report(report, birth)

    def _loss_history(self) -> list[float]:
        """The losses kept, oldest first; inside ``w.step``, with the running step's loss once it reached
        ``backward()`` (``fn`` has not returned it yet); in the unchanged loop, with the losses of the step not
        ended yet (a crash explained before its update, a ``break_if`` after its backward)."""
        kept = list(self._history)
        step, loss = self._running_loss
        if self._ctx is not None and step == self._ctx.index and loss is not None:
            kept.append(loss)
        elif self._ctx is None and self._step_losses:
            kept.append(self._running_step_loss())
        values = []
        for v in kept:
            with contextlib.suppress(Exception):
                values.append(float(v))
        return values

    def _max_abs(self, finding: Finding | None) -> tuple[float | None, str | None]:
        """The largest finite magnitude, and of what: of the op's inputs when one overflowed, else of all
        gradients and parameters (a diverging run shows 1e30 long before it shows Inf)."""
        found = op_max_abs(finding)
        if found[0] is not None:
            return found
        value = max_abs([p.grad for p in self._params if p.grad is not None] + list(self._params))
        return value, ("parameters and gradients" if value is not None else None)

    # ------------------------------------------------------------ re-running steps
    def _localize_in_window(self, first: int, window: Window) -> tuple[Finding, Source] | None:
        """Replay the window's steps before ``first`` (updates included), localize ``first``, put everything back."""
        target = next((c for c in window.steps if c.index == first), None)
        if target is None or target.hyper is None:
            return None
        optimizer = window.optimizer
        with kept(self._params, self._buffers) as saved_rng, optimizer_kept(optimizer), self._scaler_kept():
            with torch.no_grad():
                torch._foreach_copy_(self._params, window.params)
            load_optimizer_state(optimizer, window.optimizer_state)
            for p in self._params:
                p.grad = None
            self._replaying = True
            try:
                for c in window.steps:
                    if c.index == first:
                        break
                    restore_rng({**saved_rng, **c.rng})
                    self._buffers.restore(c.buffers)
                    set_hyper(optimizer, c.hyper or [])
                    c.fn(*c.args, **c.kwargs)
            finally:
                self._replaying = False
            set_hyper(optimizer, target.hyper)
            state = self._buffers.into({k: v.detach().clone() for k, v in self._inner.state_dict().items()},
                                       target.buffers)
            source = Source(target, state, cloned(optimizer.state_dict()))
            finding = self._rerun(target)
            return (finding, source) if finding is not None else None

    def _rerun(self, ctx: StepContext, masks: list[str] | None = None) -> Finding | None:
        """Run the step again from its captured state with everything watched, then put everything back. ``masks``:
        where the buffers the step filled with a deliberate Inf are named (``buffer_writes.written``)."""
        start_params = self._param_store if not ctx.checked else None
        inputs = (ctx.args, ctx.kwargs) if ctx.forwards is None else [(f.args, f.kwargs) for f in ctx.forwards]
        input_bad = any_nonfinite(inputs)

        def reset() -> None:
            restore_rng(start_rng)
            self._buffers.restore(ctx.buffers)
            if start_params is not None:
                with torch.no_grad():
                    torch._foreach_copy_(self._params, start_params)
            for p in self._params:
                p.grad = None

        # Checked after the step: an update outside torch.optim may run again in the re-run.
        with kept(self._params, self._buffers, params_too=not ctx.checked) as saved_rng, self._scaler_kept(), \
                self._alone(), warnings.catch_warnings():
            start_rng = {**saved_rng, **ctx.rng}  # host RNGs the step does not use are unchanged since its start
            warnings.simplefilter("ignore")  # e.g. "full backward hook is firing..." on the first layer
            return localize_rerun(self._inner, lambda: ctx.fn(*ctx.args, **ctx.kwargs), input_bad=input_bad,
                                  reset=reset, inputs=inputs,
                                  leftover=lambda t: self._guard(written, t, self._inner, masks))

    def _buffer_finding(self, ctx: StepContext | None, can_rerun: bool) -> Finding | None:
        """A buffer went non-finite while the loss and gradients stayed finite (``buffer_writes``): the op that
        wrote it, from a re-run of the step; else which buffer holds it."""
        if nonfinite_buffer(self._inner) is None:
            return None
        finding, masks = None, []
        if can_rerun:
            try:
                finding = self._rerun(ctx, masks)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - the step raised when run again: say which buffer
                log.debug("tensor_dap.watch: re-running the step failed: %r", exc)
        if finding is None and deliberate(self._inner, masks, can_rerun) and isinstance(self._sentinel.source, Watched):
            self._sentinel.source.dismiss()  # a -inf mask the step made: not checked from now on
            return None
        return finding or held(self._inner, ctx.buffers if ctx is not None else None)

    @contextlib.contextmanager
    def _scaler_kept(self) -> Iterator[None]:
        """A re-run through ``scaler.step``/``update`` must not move a known GradScaler's scale."""
        scaler = self.scaler
        saved = None
        if scaler is not None:
            with contextlib.suppress(Exception):
                saved = (scaler._scale.clone() if scaler._scale is not None else None,
                         scaler._growth_tracker.clone() if scaler._growth_tracker is not None else None,
                         {k: dict(v) for k, v in scaler._per_optimizer_states.items()})
        try:
            yield
        finally:
            if saved is not None:
                scale, tracker, states = saved
                if scale is not None:
                    scaler._scale.copy_(scale)
                if tracker is not None:
                    scaler._growth_tracker.copy_(tracker)
                scaler._per_optimizer_states.clear()
                scaler._per_optimizer_states.update(states)

    def _write_bundle(self, report: Report, source: Source) -> None:
        ctx = source.ctx
        try:
            state = source.model_state
            if state is None:  # the buffers as they were before the step's forward
                state = self._buffers.into(self._inner.state_dict(), ctx.buffers)
            optimizer = self.optimizer or ctx.optimizer
            opt_state = source.optimizer_state
            if opt_state is None and optimizer is not None:
                opt_state = optimizer.state_dict()
            if ctx.updated or not ctx.checked:
                report.notes.append("the step's update had already run: the saved parameters are those after it")
            if report.step != ctx.index:
                report.notes.append(f"the bundle holds step {ctx.index}, the step running when this was "
                                    f"detected (the state before step {report.step} is gone)")
            kept = ctx.bundled_forwards
            forwards = [_forward_state(f) for f in kept] if kept is not None else None
            write_bundle(report, step=ctx.index, args=ctx.args, kwargs=ctx.kwargs, model_state=state,
                         optimizer_state=opt_state, rng={**capture_rng(), **ctx.rng}, forwards=forwards,
                         root=self.capture if isinstance(self.capture, str) else None)
        except Exception as exc:  # noqa: BLE001 - a full disk must not hide the report itself
            report.notes.append(f"could not write the incident bundle: {short_error(exc, limit=None)}")

    def _fire_scaler(self, scale: float, index: int, ctx: StepContext | None) -> None:
        """A GradScaler's scale fell below ``MIN_SCALE``: the gradients overflow even unscaled."""
        try:
            finding = self._rerun(ctx) if ctx is not None else None
        except Exception:  # noqa: BLE001 - the step raised when run again: still report the collapse
            finding = None
        if finding is None:
            finding = nonfinite_gradients(self._inner) or Finding(
                "backward", None, None, "the gradients are non-finite at every scale", [])
        headline = f"the GradScaler's scale collapsed to {scale:.3g}: gradients are non-finite even unscaled"
        report = self._report(finding, index, index, None, kind="scaler", headline=headline)
        if finding.birth is not None:
            report.notes.insert(0, finding.headline)
        self._latched = True
        self._aftermath.reported(index)
        self._finish(report, {**finding.culprit, "step": index}, Source(ctx, None, None) if ctx else None)


def _forward_state(f: Forward) -> dict[str, Any]:
    """One captured forward in safe types, for ``state.pt``."""
    line, call = (tuple(where) if where is not None else None for where in (f.line, f.call))
    loss = f.loss if isinstance(f.loss, (float, torch.Tensor)) else None  # (a non-finite one fails the replay too)
    return {"args": f.args, "kwargs": f.kwargs, "rng": safe_rng(f.rng), "grads": list(f.output_grads()), "line": line,
            "call": call, "loss": loss, "entry": f.entry, "amp": f.amp}


def report_of(finding: Finding, *, step: int | None, kind: str = "nonfinite", headline: str | None = None) -> Report:
    """The report of a finding: where, the op and the user's line, the tensors, a first diagnosis."""
    birth, line = finding.birth, finding.line
    report = Report(kind=kind, headline=headline or finding.headline, step=step, phase=finding.phase,
                    module=finding.module, module_type=finding.module_type, rank=current_rank(),
                    notes=[finding.note], tensors=list(finding.tensors), op=finding.op,
                    forward_op=birth.forward_op if birth is not None else None,
                    source=source_field(line, near=birth.near if birth is not None else None))
    report.loss = next((float(s.values[0]) for sec, _, s in finding.tensors if sec == "loss" and s.values), None)
    report.max_abs, report.max_abs_of = op_max_abs(finding)
    report.diagnosis = diagnose_report(report, birth)
    return report


def op_max_abs(finding: Finding | None) -> tuple[float | None, str | None]:
    """When an op overflowed from finite inputs: the largest magnitude among those inputs, and what it is of
    (a report's label); (None, None) otherwise."""
    birth = finding.birth if finding is not None else None
    if birth is None or birth.phase not in ("forward", "loss") or birth.cause is not None:
        return None, None
    value = max_abs(input_tensors(birth.inputs))
    return value, (OP_INPUTS if value is not None else None)
