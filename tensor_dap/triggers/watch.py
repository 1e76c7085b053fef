"""``watch``: keep a NaN/Inf sentinel on for a whole run; localize only when it fires.

Usage::

    with tensor_dap.watch(model, optimizer) as w:
        for x, y in loader:
            loss = w.step(train_step, x, y)   # train_step(x, y) does zero_grad/forward/backward/step

Every step costs a few device kernels (see ``sentinel``). The check runs in an
optimizer *pre*-step hook, so when it fires the parameters and optimizer state are still
those from before the step: together with the RNG states and buffers captured when
``w.step`` began, that is enough to re-run the step with hooks on every module
(``localize``) and to write a replayable incident bundle. After reporting, the update goes
ahead exactly as it would without ``watch`` (unless the trigger raised), so numerics are
unchanged.
"""

from __future__ import annotations

import bdb
import logging
import warnings
from collections.abc import Collection
from typing import Any, Callable

import torch

from ..dist import current_rank, no_collectives, unwrap
from ..errors import NonFiniteError, TriggerError
from ..state import (
    Buffers,
    capture_rng,
    cloned,
    host_rngs_used,
    hyper,
    kept,
    load_optimizer_state,
    optimizer_kept,
    restore_rng,
    set_hyper,
)
from ..summary import describe
from .capture import Source, StepContext, Window, add_to_window, loss_of, open_window
from .incident import write_bundle
from .localize import (
    NOT_LOCAL,
    NOT_REPRODUCED,
    Finding,
    any_nonfinite,
    localize_rerun,
    nonfinite,
    nonfinite_gradients,
    nonfinite_parameters,
)
from .report import Report
from .sentinel import Sentinel, group
from .stop import check_mode, dispatch

log = logging.getLogger("tensor_dap.triggers")

class watch:
    """Watch forward outputs, gradients and parameter updates of ``model`` for NaN/Inf.

    Hand each training step to ``w.step(fn, *args, **kwargs)``; ``fn`` must run one whole
    step from its arguments (it is run a second time, from the captured state, to find the
    first bad module). Without ``w.step`` the sentinel still runs in the optimizer hook, but
    the report can only name the module holding a bad gradient. ``every`` reads the sentinel
    back once every that many steps (use it on GPU; detection is then up to every-1 steps
    late). ``capture`` writes incident bundles (True: ``.tensor_dap/incidents``, or a folder).
    ``on`` and ``ranks``: see the docs (docs/triggers.md). The handle is active on
    creation; ``close()`` or leaving the ``with`` block removes its hooks.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                 on: str = "auto", every: int = 1, capture: bool | str = True,
                 ranks: Collection[int] | None = None) -> None:
        check_mode(on)
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every={every!r}: expected a positive integer")
        self.model, self.optimizer = model, optimizer
        self._inner = unwrap(model)  # hooks, names and saved state use the module inside DDP
        self.on, self.every, self.capture, self.ranks = on, every, capture, ranks
        self.step_count = 0  # index of the next step; set it when resuming a run
        self.reports: list[Report] = []
        self.suppressed = 0  # firings not reported again while the model stayed non-finite
        self._sentinel = Sentinel(every)
        self._params = [p for p in self._inner.parameters() if p.requires_grad]
        self._groups = group(self._params)  # by (device, dtype), once: gradients share their parameter's
        self._buffers = Buffers(self._inner)
        self._ctx: StepContext | None = None
        self._rerunning = False
        self._replaying = False  # replaying a window's steps, updates included (every > 1)
        self._window: Window | None | bool = None  # False: no window until the next read (too large)
        self._stepper = optimizer  # the optimizer that steps (found by the hook when not given)
        self._latched = False
        # Python's and numpy's RNG states are slow to copy; a step that does not draw from them
        # leaves them as they were at its start, so reading them when a trigger fires is enough.
        self._host_rngs = {"python": True, "numpy": True}
        self._probe_rngs = True
        # How steps update the parameters decides where the check runs. "optimizer": in the
        # pre-step hook of a torch.optim optimizer; a step without an update is then deliberate
        # (a GradScaler skipping an overflow, gradient accumulation) and is checked at the next
        # update. "manual": the parameters change without torch.optim, so the check runs when
        # w.step returns and the parameters are copied at each step start for the re-run.
        # None: not known yet (parameters are copied and compared until it is).
        self._mode: str | None = "optimizer" if optimizer is not None else None
        self._param_store: list[torch.Tensor] | None = None
        self._last_loss: tuple[int, torch.Tensor | None] = (-1, None)
        self._handles: list[Any] = []
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._before_update))
            self._handles.append(optimizer.register_step_post_hook(self._after_update))
        else:  # no optimizer given: check before whichever optimizer steps
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            self._handles.append(register_optimizer_step_pre_hook(self._before_update))
            self._handles.append(register_optimizer_step_post_hook(self._after_update))

    @property
    def reads(self) -> int:
        """Host reads the sentinel has made so far (one per ``every`` steps)."""
        return self._sentinel.reads

    # ------------------------------------------------------------ the user's side
    def __enter__(self) -> watch:  # noqa: PYI034 - no typing_extensions dependency
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.close(flush=exc_type is None)

    def close(self, *, flush: bool = True) -> None:
        """Remove the hooks; with ``flush``, read a pending sentinel (the last step's loss) first."""
        try:
            if flush and self._handles:
                self._guard(self._read_and_fire, self.step_count, None)
        finally:
            for h in self._handles:
                h.remove()
            self._handles.clear()

    def step(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as training step ``self.step_count`` under the sentinel."""
        windowed = self._windowed()
        ctx = StepContext(self.step_count, fn, args, kwargs, capture_rng(**self._host_rngs),
                           self._buffers.clone() if windowed else self._buffers.save())
        if windowed:
            self._guard(self._track, ctx)
        if self._mode == "manual":
            with torch.no_grad():
                torch._foreach_copy_(self._param_store, self._params)
        elif self._mode is None:
            self._param_store = [p.detach().clone() for p in self._params]
        self._ctx = ctx
        try:
            result = fn(*args, **kwargs)
            if self._probe_rngs:  # the first step shows which host RNGs the step itself draws from
                self._probe_rngs = False
                self._host_rngs = host_rngs_used(ctx.rng)
            loss = loss_of(result)
            self._last_loss = (ctx.index, loss)
            if loss is not None:
                self._guard(self._sentinel.observe_value, loss, ctx.index)
            if not ctx.checked and self._mode is None and self._params_changed():
                self._mode = "manual"
            if not ctx.checked and self._mode == "manual":
                self._check(ctx.index, ctx)
            return result
        finally:
            self._ctx = None
            self.step_count = ctx.index + 1

    def _windowed(self) -> bool:
        """Keep a window of steps to replay (every > 1, torch.optim updates, one process: under DDP
        a local replay would skip the gradient all-reduce)."""
        return (self.every > 1 and self._mode == "optimizer" and self._stepper is not None
                and self._window is not False and current_rank() is None)

    def _track(self, ctx: StepContext) -> None:
        optimizer = self._stepper
        if optimizer is None or self._window is False:
            return
        ctx.hyper = hyper(optimizer)  # a scheduler outside the step changes lr between steps
        if self._window is None:  # the first step of a run: save where it starts
            self._window = self._new_window(ctx.index)
        if isinstance(self._window, Window):
            self._add_to_window(self._window, ctx)

    def _new_window(self, start: int) -> Window | bool:
        """A window from the state now (the start of step ``start``); False (none until the next read) if too large."""
        assert self._stepper is not None
        return open_window(start, self._params, self._stepper) or False

    def _add_to_window(self, window: Window, ctx: StepContext) -> None:
        if not add_to_window(window, ctx):
            self._window = False  # the batches held for the replay outgrew the budget

    def _params_changed(self) -> bool:
        return any(not torch.equal(p, old) for p, old in zip(self._params, self._param_store or ()))

    # ------------------------------------------------------------ optimizer hooks
    def _before_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._replaying:
            return  # a window's earlier steps run again as they ran, updates included
        if self._rerunning:
            from .localize import StopRerun

            raise StopRerun()  # localization re-runs forward and backward, never the update
        ctx = self._ctx
        if ctx is not None:
            ctx.checked = True
            ctx.optimizer = self._stepper = optimizer
            self._mode, self._param_store = "optimizer", None
        self._check(ctx.index if ctx else self.step_count, ctx)

    def _after_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._ctx is None and not self._replaying:
            self.step_count += 1  # a plain loop: count optimizer steps

    # ------------------------------------------------------------ sentinel → report
    def _guard(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run our own code so that a failure of tensor_dap never breaks the training loop."""
        try:
            fn(*args)
        except (TriggerError, bdb.BdbQuit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - tensor_dap's failure must not stop training
            log.warning("tensor_dap.watch: internal error, check skipped: %s: %s", type(exc).__name__, exc)

    def _check(self, index: int, ctx: StepContext | None) -> None:
        grads = [[gr for p in g if (gr := p.grad) is not None and not gr.is_sparse] for g in self._groups]
        self._guard(self._sentinel.observe, grads, index)
        if self._sentinel.due():
            self._guard(self._read_and_fire, index, ctx)

    def _read_and_fire(self, index: int, ctx: StepContext | None) -> None:
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
            return
        report, culprit, source = self._investigate(first, index, ctx, window)
        if report is None:
            return
        self._latched = True
        if self.capture and source is not None:
            self._write_bundle(report, source)
        elif self.capture and ctx is not None:
            self._write_bundle(report, Source(ctx, None, None))
        self.reports.append(report)
        dispatch(report, on=self.on, error=NonFiniteError, ranks=self.ranks, culprit=culprit)

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
        can_rerun = ctx is not None and ctx.index == index
        pre_update = ctx is None or ctx.checked  # else the step's own update already ran
        finding = nonfinite_parameters(self._inner) if pre_update else None
        step = index
        if finding is not None:
            step = index - 1 if self.every == 1 else first
            if index == 0:
                finding.note += " (already at the first watched step)"
        elif grads_bad or (loss_bad and loss_step == index):
            finding = self._rerun(ctx) if can_rerun else None  # type: ignore[arg-type]
            if finding is None and grads_bad:
                finding = nonfinite_gradients(self._inner)
                if finding is not None and can_rerun:
                    finding.note = (NOT_LOCAL if current_rank() is not None else NOT_REPRODUCED) + finding.note
        elif not loss_bad:
            return None, {}, None  # the sum of norms overflowed, but every value is finite: no alarm
        if finding is None:
            step = loss_step
            finding = Finding("loss", None, None, "the loss is non-finite while every gradient and parameter "
                              "is finite: the loss computation overflowed, or a term no parameter depends on "
                              "is non-finite", [("loss", "loss", describe(loss))], {"loss": loss})
        report = self._report(finding, step, index, None, first=first)
        return report, {**finding.culprit, "step": step}, None

    def _report(self, finding: Finding, step: int, index: int, window: Window | None, *,
                first: int | None = None) -> Report:
        loss_value = next((float(s.values[0]) for sec, _, s in finding.tensors if sec == "loss" and s.values),
                          None)
        report = Report(kind="nonfinite", headline=finding.headline, step=step, phase=finding.phase,
                        module=finding.module, module_type=finding.module_type, rank=current_rank(),
                        notes=[finding.note], tensors=list(finding.tensors), loss=loss_value)
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

    def _localize_in_window(self, first: int, window: Window) -> tuple[Finding, Source] | None:
        """Replay the window's steps before ``first`` (updates included), localize ``first``, put everything back."""
        target = next((c for c in window.steps if c.index == first), None)
        if target is None or target.hyper is None:
            return None
        optimizer = window.optimizer
        with kept(self._params, self._buffers) as saved_rng, optimizer_kept(optimizer):
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

    def _rerun(self, ctx: StepContext) -> Finding | None:
        """Run the step again from its captured state with hooks everywhere, then put everything back."""
        start_params = self._param_store if not ctx.checked else None
        input_bad = any_nonfinite((ctx.args, ctx.kwargs))

        def reset() -> None:
            restore_rng(start_rng)
            self._buffers.restore(ctx.buffers)
            if start_params is not None:
                with torch.no_grad():
                    torch._foreach_copy_(self._params, start_params)
            for p in self._params:
                p.grad = None

        # Checked after the step: an update outside torch.optim may run again in the re-run.
        with kept(self._params, self._buffers, params_too=not ctx.checked) as saved_rng:
            start_rng = {**saved_rng, **ctx.rng}  # host RNGs the step does not use are unchanged since its start
            self._rerunning = True
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # e.g. "full backward hook is firing..." on the first layer
                    with no_collectives(self.model):  # each rank re-runs alone
                        return localize_rerun(self._inner, lambda: ctx.fn(*ctx.args, **ctx.kwargs),
                                              input_bad=input_bad, reset=reset)
            finally:
                self._rerunning = False

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
            if not ctx.checked:
                report.notes.append("the step made no torch.optim step: the saved parameters are those after it")
            if report.step != ctx.index:
                report.notes.append(f"the bundle holds step {ctx.index}, the step running when this was "
                                    f"detected (the state before step {report.step} is gone)")
            write_bundle(report, step=ctx.index, args=ctx.args, kwargs=ctx.kwargs, model_state=state,
                         optimizer_state=opt_state,
                         rng={**capture_rng(), **ctx.rng}, root=self.capture if isinstance(self.capture, str) else None)
        except Exception as exc:  # noqa: BLE001 - a full disk must not hide the report itself
            report.notes.append(f"could not write the incident bundle: {type(exc).__name__}: {exc}")
