"""``watch``: keep a NaN/Inf sentinel on for a whole run; localize only when it fires.

Usage::

    with tensor_dap.watch(model, optimizer) as w:
        for x, y in loader:
            loss = w.step(train_step, x, y)   # train_step(x, y) does zero_grad/forward/backward/step

Every step costs a few device kernels (see ``_trigger_sentinel``). The check runs in an
optimizer *pre*-step hook, so when it fires the parameters and optimizer state are still
those from before the step: together with the RNG states and buffers captured when
``w.step`` began, that is enough to re-run the step with hooks on every module
(``localize``) and to write a replayable incident bundle. After reporting, the update goes
ahead exactly as it would without ``watch`` (unless the trigger raised), so numerics are
unchanged.
"""

from __future__ import annotations

import bdb
import contextlib
import logging
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ._trigger_dist import current_rank, no_collectives, unwrap
from ._trigger_sentinel import Sentinel, group
from ._trigger_stop import check_mode, dispatch
from .errors import NonFiniteError, TriggerError
from .incident import capture_rng, host_rngs_used, map_tensors, restore_rng, write_bundle
from .localize import (
    Finding,
    any_nonfinite,
    localize_rerun,
    nonfinite,
    nonfinite_gradients,
    nonfinite_parameters,
    tensors_in,
)
from .report import Report
from .summary import describe

log = logging.getLogger("tensor_dap.triggers")

# every > 1 keeps a replay window (a copy of the parameters and optimizer state, plus each step's
# arguments) only while it holds at most this many bytes: a large model is localized on the
# detection step instead of doubling its memory.
WINDOW_BYTES = 512 * 2**20


@dataclass
class _StepContext:
    """What ``w.step`` captured before running the step: enough to run it again."""

    index: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: dict[str, Any]
    buffers: list[torch.Tensor]
    checked: bool = False
    optimizer: torch.optim.Optimizer | None = None  # the one that stepped (found by the global hook)
    hyper: list[dict[str, Any]] | None = None  # every > 1: the optimizer's param_groups settings (lr...)


@dataclass
class _Window:
    """every > 1: the state at the start of the first step since the last clean read, and each step's context.

    A read finds the first failing step, but the model has moved on since; from this state the
    steps before it are replayed (with their updates) to reach its exact pre-step state, and it
    is localized there. Costs one copy of the parameters and optimizer state per ``every`` steps.
    """

    start: int
    params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    optimizer_state: dict[Any, dict[str, Any]]  # see _optimizer_state
    steps: list[_StepContext]
    nbytes: int = 0


@dataclass
class _Source:
    """What an incident bundle holds when it is not the step being checked now (see ``_Window``)."""

    ctx: _StepContext
    model_state: dict[str, Any] | None  # None: the live state (the step being checked now)
    optimizer_state: dict[str, Any] | None


def _hyper(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def _set_hyper(optimizer: torch.optim.Optimizer, hyper: list[dict[str, Any]]) -> None:
    for g, saved in zip(optimizer.param_groups, hyper):
        g.update(saved)


def _optimizer_state(optimizer: torch.optim.Optimizer) -> dict[Any, dict[str, Any]]:
    """A copy of ``optimizer.state`` (per parameter: momentum, Adam moments, step...)."""
    return {p: _cloned(dict(st)) for p, st in optimizer.state.items()}


def _load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[Any, dict[str, Any]]) -> None:
    """Put a ``_optimizer_state`` copy back *in place*: the optimizer's own dicts and tensors stay the same
    objects (``load_state_dict`` would replace them, under code holding references to them)."""
    for p in [p for p in optimizer.state if p not in saved]:
        del optimizer.state[p]
    for p, st in saved.items():
        live = optimizer.state[p]
        for k in [k for k in live if k not in st]:
            del live[k]
        for k, v in st.items():
            old = live.get(k)
            if isinstance(v, torch.Tensor) and isinstance(old, torch.Tensor) and old.shape == v.shape \
                    and old.dtype == v.dtype and old.device == v.device:
                with torch.no_grad():
                    old.copy_(v)
            else:
                live[k] = _cloned(v)


@contextlib.contextmanager
def _optimizer_kept(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Within, a replay may change the optimizer's state and settings: both are put back, in place, on the way out."""
    saved_state, saved_hyper = _optimizer_state(optimizer), _hyper(optimizer)
    try:
        yield
    finally:
        _load_optimizer_state(optimizer, saved_state)
        _set_hyper(optimizer, saved_hyper)


def _nbytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for _, t in tensors_in(obj))


def _cloned(obj: Any) -> Any:
    """A copy of a state_dict-like structure, tensors cloned where they are (no host sync)."""
    return map_tensors(obj, lambda t: t.detach().clone())


class _Buffers:
    """Module buffers (BatchNorm statistics...) copied at each step start, the only state a forward writes."""

    def __init__(self, model: torch.nn.Module) -> None:
        named = list(model.named_buffers())
        self.names = [n for n, _ in named]
        self.live = [b for _, b in named]
        self._store = [torch.empty_like(b) for b in self.live]

    def save(self) -> list[torch.Tensor]:
        if self.live:
            with torch.no_grad():
                torch._foreach_copy_(self._store, self.live)  # one call, no allocation
        return self._store

    def clone(self) -> list[torch.Tensor]:
        return [b.detach().clone() for b in self.live]

    def restore(self, values: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for live, value in zip(self.live, values):
                live.copy_(value)

    def into(self, state: dict[str, Any], values: list[torch.Tensor]) -> dict[str, Any]:
        """``state`` (the model's state_dict) with its buffers replaced by ``values`` (a step's start)."""
        for name, value in zip(self.names, values):
            if name in state:
                state[name] = value
        return state


def _loss_of(result: Any) -> torch.Tensor | None:
    """The loss inside what a step function returned: a scalar tensor, the first item, or ['loss']."""
    if isinstance(result, dict):
        result = result.get("loss")
    elif isinstance(result, (tuple, list)) and result:
        result = result[0]
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        return result.detach()
    return None


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
        self._buffers = _Buffers(self._inner)
        self._ctx: _StepContext | None = None
        self._rerunning = False
        self._replaying = False  # replaying a window's steps, updates included (every > 1)
        self._window: _Window | None | bool = None  # False: no window until the next read (too large)
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
        ctx = _StepContext(self.step_count, fn, args, kwargs, capture_rng(**self._host_rngs),
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
            loss = _loss_of(result)
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

    def _track(self, ctx: _StepContext) -> None:
        optimizer = self._stepper
        if optimizer is None or self._window is False:
            return
        ctx.hyper = _hyper(optimizer)  # a scheduler outside the step changes lr between steps
        if self._window is None:  # the first step of a run: save where it starts
            self._window = self._new_window(ctx.index)
        if isinstance(self._window, _Window):
            self._add_to_window(self._window, ctx)

    def _new_window(self, start: int) -> _Window | bool:
        """Copy the parameters and optimizer state as they are now, the start of step ``start``."""
        optimizer = self._stepper
        assert optimizer is not None
        nbytes = _nbytes(self._params) + _nbytes(list(optimizer.state.values()))
        if nbytes > WINDOW_BYTES:
            return False  # too large to copy: no window until the next read
        return _Window(start, [p.detach().clone() for p in self._params], optimizer,
                       _optimizer_state(optimizer), [], nbytes)

    def _add_to_window(self, window: _Window, ctx: _StepContext) -> None:
        window.nbytes += _nbytes((ctx.args, ctx.kwargs, ctx.buffers))
        if window.nbytes > WINDOW_BYTES:
            self._window = False  # the batches held for the replay outgrew the budget
        else:
            window.steps.append(ctx)

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

    def _check(self, index: int, ctx: _StepContext | None) -> None:
        grads = [[gr for p in g if (gr := p.grad) is not None and not gr.is_sparse] for g in self._groups]
        self._guard(self._sentinel.observe, grads, index)
        if self._sentinel.due():
            self._guard(self._read_and_fire, index, ctx)

    def _read_and_fire(self, index: int, ctx: _StepContext | None) -> None:
        first = self._sentinel.read()
        window, self._window = self._window or None, None
        if first is None:
            self._latched = False  # clean again: the next failure is news
            if ctx is not None and ctx.hyper is not None and ctx.checked and self._windowed():
                # Checked before the update: the state now is this step's pre-step state, and its
                # loss is not read yet. The next window starts here, so it covers that loss too.
                self._window = self._new_window(ctx.index)
                if isinstance(self._window, _Window):
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
            self._write_bundle(report, _Source(ctx, None, None))
        self.reports.append(report)
        dispatch(report, on=self.on, error=NonFiniteError, ranks=self.ranks, culprit=culprit)

    def _investigate(self, first: int, index: int, ctx: _StepContext | None, window: _Window | None
                     ) -> tuple[Report | None, dict[str, Any], _Source | None]:
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
                    finding.note = (_NOT_LOCAL if current_rank() is not None else _NOT_REPRODUCED) + finding.note
        elif not loss_bad:
            return None, {}, None  # the sum of norms overflowed, but every value is finite: no alarm
        if finding is None:
            step = loss_step
            finding = Finding("loss", None, None, "the loss is non-finite while every gradient and parameter "
                              "is finite: the loss computation overflowed, or a term no parameter depends on "
                              "is non-finite", [("loss", "loss", describe(loss))], {"loss": loss})
        report = self._report(finding, step, index, None, first=first)
        return report, {**finding.culprit, "step": step}, None

    def _report(self, finding: Finding, step: int, index: int, window: _Window | None, *,
                first: int | None = None) -> Report:
        loss_value = next((float(s.values[0]) for sec, _, s in finding.tensors if sec == "loss" and s.values),
                          None)
        report = Report(kind="nonfinite", headline=_headline(finding), step=step, phase=finding.phase,
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

    def _localize_in_window(self, first: int, window: _Window) -> tuple[Finding, _Source] | None:
        """Replay the window's steps before ``first`` (updates included), localize ``first``, put everything back."""
        target = next((c for c in window.steps if c.index == first), None)
        if target is None or target.hyper is None:
            return None
        optimizer = window.optimizer
        with self._kept(params=True) as saved_rng, _optimizer_kept(optimizer):
            with torch.no_grad():
                torch._foreach_copy_(self._params, window.params)
            _load_optimizer_state(optimizer, window.optimizer_state)
            for p in self._params:
                p.grad = None
            self._replaying = True
            try:
                for c in window.steps:
                    if c.index == first:
                        break
                    restore_rng({**saved_rng, **c.rng})
                    self._buffers.restore(c.buffers)
                    _set_hyper(optimizer, c.hyper or [])
                    c.fn(*c.args, **c.kwargs)
            finally:
                self._replaying = False
            _set_hyper(optimizer, target.hyper)
            state = self._buffers.into({k: v.detach().clone() for k, v in self._inner.state_dict().items()},
                                       target.buffers)
            source = _Source(target, state, _cloned(optimizer.state_dict()))
            finding = self._rerun(target)
            return (finding, source) if finding is not None else None

    def _rerun(self, ctx: _StepContext) -> Finding | None:
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
        with self._kept(params=not ctx.checked) as saved_rng:
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

    @contextlib.contextmanager
    def _kept(self, *, params: bool) -> Iterator[dict[str, Any]]:
        """Within, a replay or re-run may change gradients, buffers, RNG states (and parameters): all are put
        back on the way out. Yields the RNG states saved on the way in."""
        saved_rng, saved_buffers = capture_rng(), self._buffers.clone()
        saved_grads = [(p, p.grad) for p in self._params]
        saved_params = [p.detach().clone() for p in self._params] if params else None
        try:
            yield saved_rng
        finally:
            for p, g in saved_grads:
                p.grad = g
            if saved_params is not None:
                with torch.no_grad():
                    torch._foreach_copy_(self._params, saved_params)
            self._buffers.restore(saved_buffers)
            restore_rng(saved_rng)

    def _write_bundle(self, report: Report, source: _Source) -> None:
        ctx = source.ctx
        try:
            state = source.model_state
            if state is None:  # the buffers as they were before the step's forward
                state = self._buffers.into(self._inner.state_dict(), ctx.buffers)
            optimizer = self.optimizer or ctx.optimizer
            optimizer_state = source.optimizer_state
            if optimizer_state is None and optimizer is not None:
                optimizer_state = optimizer.state_dict()
            if not ctx.checked:
                report.notes.append("the step made no torch.optim step: the saved parameters are those after it")
            if report.step != ctx.index:
                report.notes.append(f"the bundle holds step {ctx.index}, the step running when this was "
                                    f"detected (the state before step {report.step} is gone)")
            write_bundle(report, step=ctx.index, args=ctx.args, kwargs=ctx.kwargs, model_state=state,
                         optimizer_state=optimizer_state,
                         rng={**capture_rng(), **ctx.rng}, root=self.capture if isinstance(self.capture, str) else None)
        except Exception as exc:  # noqa: BLE001 - a full disk must not hide the report itself
            report.notes.append(f"could not write the incident bundle: {type(exc).__name__}: {exc}")


_NOT_LOCAL = ("this rank's own step is finite when re-run alone: the non-finite gradient arrived through "
              "the all-reduce from another rank (see its report); ")
_NOT_REPRODUCED = "the re-run did not reproduce it (a nondeterministic step?); "


def _headline(f: Finding) -> str:
    name = "<root>" if f.module == "" else f.module
    if f.phase == "input":
        return f"non-finite input batch, first seen by {name}"
    if f.phase == "optimizer":
        return f"the optimizer update made a parameter of {name} non-finite"
    if f.phase == "loss":
        return "non-finite loss"
    return f"first non-finite value in the {f.phase} of {name}"
