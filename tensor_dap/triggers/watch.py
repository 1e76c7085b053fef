"""``watch``: keep a NaN/Inf sentinel on for a whole run; localize only when it fires.

Usage, on an existing loop (nothing else changes)::

    with tensor_dap.watch(model, optimizer):
        for x, y in loader:
            ...                                  # zero_grad, forward, loss, backward, optimizer.step()

or, to hand each step over (the exact mode: the loss function is re-run too)::

    with tensor_dap.watch(model, optimizer) as w:
        for x, y in loader:
            loss = w.step(train_step, x, y)      # train_step(x, y) does zero_grad/forward/backward/step

Every step costs a few device kernels (see ``sentinel``). The check runs in an optimizer *pre*-step hook, so when it
fires the parameters and optimizer state are still those from before the step: together with what was captured at the
step's start (``w.step``'s arguments, or the model's forwards for an unchanged loop, see ``loop``), that is enough to
re-run the step with every op and module watched (``investigate``, ``localize``) and to write a replayable incident
bundle. After reporting, the update goes ahead exactly as it would without ``watch`` (unless the trigger raised), so
numerics are unchanged. Frames a trigger raises through set ``__tracebackhide__`` (IPython and pytest hide them).
"""

from __future__ import annotations

import atexit
from collections import deque
from collections.abc import Collection
from typing import Any, Callable

import torch

from .. import batch_origin
from ..dist import called, current_rank, unwrap
from ..errors import STOPS
from ..state import Buffers, RngUse, capture_rng, hyper
from . import active, running_total
from .aftermath import FLAT_STEPS, Aftermath
from .buffer_writes import taken_in, watched
from .capture import Source, StepContext, Window, add_to_window, loss_of, open_window, same_value
from .crashed import CrashExplanation
from .investigate import Investigation
from .localize import StopRerun
from .loss_tap import listen
from .silent import SilentChecks
from .optimizer_call import MIN_SCALE, SCALER_PROBE_STEPS, closure_of, optimizers_given, scaler_calling
from .parts import as_model
from .loop import LoopCapture
from .loop_steps import LoopSteps
from .report import Report
from .sentinel import Sentinel, group
from .hang import watchdog
from .stop import check_mode

# losses kept for the report (CPU values; else 0-dim tensors) and for the end of the run's note on a flat loss
LOSS_HISTORY = max(32, FLAT_STEPS)


class watch(Investigation, LoopSteps, CrashExplanation):
    """Watch forward outputs, gradients, losses and parameter updates of ``model`` (a module, or a list or dict of those
    one optimizer trains) for NaN/Inf. ``optimizer``: the one updating ``model``, a list of those that do (checked once
    a step, before the first update), or None (found when it steps). Around an unchanged loop it captures what
    re-running a step needs from hooks (``rerun=False`` keeps nothing: see docs/triggers.md for what that costs in
    memory); hand steps to ``w.step(fn, *args, **kwargs)`` to also re-run the loss function (``fn`` must run one whole
    step from its arguments). ``every`` reads the sentinel back once every that many steps (use it on GPU; detection is
    then up to every-1 steps late). ``capture`` writes incident bundles (True: ``.tensor_dap/incidents``, or a folder).
    ``scaler``: the ``torch.amp.GradScaler`` in use, if any (found by itself when it calls ``optimizer.step``). ``on``
    and ``ranks``: see docs/triggers.md. ``hang_after``: seconds without a finished optimizer step before every thread's
    stack is written and where each rank waits is said (``hang``). The handle is active on creation; ``close()``,
    leaving the ``with`` block or the end of the program removes its hooks and says how many steps were non-finite.
    """

    def __init__(self, model: torch.nn.Module | list | dict, optimizer: torch.optim.Optimizer | list | None = None, *,
                 on: str = "auto", every: int = 1, capture: bool | str = True, ranks: Collection[int] | None = None,
                 scaler: Any = None, rerun: bool = True, hang_after: float | None = None) -> None:
        check_mode(on)
        optimizer, more = optimizers_given(optimizer)  # several updating the model: the others are added
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every={every!r}: expected a positive integer")
        self.model, self.optimizer, self.scaler = as_model(model), optimizer, scaler  # (several: ``parts``)
        self._inner = unwrap(self.model)  # names, saved state and re-runs use the module inside DDP/compile
        self.on, self.every, self.capture, self.ranks = on, every, capture, ranks
        self.step_count = 0  # index of the next step; set it when resuming a run
        self.reports: list[Report] = []
        self.suppressed = 0  # firings not reported again while the model stayed non-finite
        self._sentinel = Sentinel(every)
        self._params = [p for p in self._inner.parameters() if p.requires_grad]
        # By (device, dtype), once: gradients share their parameter's. Each group is read last to first: an
        # optimizer updates the first parameters first, and their gradients are then the ones still in cache.
        self._groups = [g[::-1] for g in group(self._params)]
        self._buffers = Buffers(self._inner)
        self._sentinel.also(watched(self._buffers, self._params))  # buffers a forward writes (``buffer_writes``)
        self._ctx: StepContext | None = None
        self._last_ctx: StepContext | None = None
        self._adopted: StepContext | None = None  # the last w.step, whose update runs after it (``_handed_over``)
        self._rerunning = self._latched = False
        self._replaying = False  # replaying a window's steps, updates included (every > 1)
        self._window: Window | None | bool = None  # False: no window until the next read (too large)
        self._stepper = optimizer  # the optimizer that steps (found by the hook when not given)
        self._history: deque[Any] = deque(maxlen=LOSS_HISTORY)
        self._aftermath = Aftermath(type(self._inner).__name__)
        self._silent = SilentChecks(self._inner, self._aftermath.at_end)  # what a loop gets wrong with no error
        self._watched = 0  # steps seen, for the end-of-run count
        self._scaler_probes = 0
        # RNG states cost µs to copy; a stream a step does not draw from is read when a trigger fires (state.RngUse)
        self._rngs = RngUse()
        # How steps update the parameters decides where the check runs. "optimizer": in the pre-step hook of a
        # torch.optim optimizer; a step without an update is then deliberate (a GradScaler skipping an overflow,
        # gradient accumulation) and only its loss is read. "manual": the parameters change without torch.optim, so
        # the check runs when w.step returns, parameters copied at each step start for the re-run. None: not known.
        self._mode: str | None = "optimizer" if optimizer is not None else None
        self._param_store: list[torch.Tensor] | None = None
        self._last_loss: tuple[int, torch.Tensor | None] = (-1, None)
        self._running_loss: tuple[int, torch.Tensor | None] = (-1, None)  # inside w.step: handed to backward()
        self._step_losses: list[Any] = []  # the losses given to backward() this step (``forwards.loss_value``)
        self._loop = (LoopCapture(called(self.model), self._buffers, self._params, self._loop_unstepped,
                                  self._step_losses.append) if rerun else None)
        self._noted: float | None = None  # the last loss break_if saw this step
        # The loss handed to backward(): taken by the unchanged loop's capture (one call less a step), else by watch.
        self._untap = listen(self._loop.backward_called if self._loop is not None else self._backward_loss)
        # Without an optimizer, the loop may update its parameters by hand (pytorch/examples' word language
        # model): until a torch.optim optimizer steps, gradients are checked as each backward() returns.
        self._untap_done: Callable[[], None] | None = (listen(self._backward_done, done=True)
                                                       if optimizer is None else None)
        self._by_hand = False  # a backward() has ended a step (``_step_by_hand``)
        self._joined: tuple[Callable[[], Any], Callable[[], None]] | None = None  # (closure, untap): ``join_step``
        self._param_ids = frozenset(map(id, self._params))  # which optimizer found stepping is this model's
        self._hang = watchdog(hang_after) if hang_after is not None else None
        self._handles: list[Any] = [batch_origin.follow()]  # (and the DataLoader batches' dataset indices)
        # The work after an update (counting the step, ending the loop's capture) is done at the end of the pre-step
        # hook when nothing of watch runs before the update ends (an unchanged loop's plain step); else a post-hook.
        self._post_hook: Any = None
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._before_update))
        else:  # no optimizer given: check before whichever optimizer steps
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._handles.append(register_optimizer_step_pre_hook(self._before_update))
        active.push(self)
        atexit.register(self._at_exit)
        for other in more:
            self.add_optimizer(other)

    @property
    def reads(self) -> int:
        """Host reads the sentinel has made so far (one per ``every`` steps)."""
        return self._sentinel.reads

    # ------------------------------------------------------------ the user's side
    def __enter__(self) -> watch:  # noqa: PYI034 - no typing_extensions dependency
        return self

    def __exit__(self, exc_type: object, _exc: object, tb: Any) -> None:
        if isinstance(exc_type, type) and issubclass(exc_type, Exception) and not issubclass(exc_type, STOPS):
            self._guard(self.explain_crash, tb, _exc)  # the program crashed on a value this step made non-finite?
        self.close(flush=exc_type is None)

    def close(self, *, flush: bool = True) -> None:
        """Remove the hooks; with ``flush``, read a pending sentinel (the last step's loss) first."""
        if not self._handles:
            return
        try:
            if flush:
                self._guard(self._read_and_fire, self.step_count, None)
        finally:
            for h in self._handles:
                h.remove()
            self._handles.clear()
            self._post_hook = None
            self._untap()
            if self._untap_done is not None:
                self._untap_done()
                self._untap_done = None
            self._end_join()
            if self._loop is not None:
                self._loop.remove()
            if self._hang is not None:
                self._hang.close()
            active.remove(self)
            atexit.unregister(self._at_exit)
            # a step that raised in the optimizer's hook did not end: it counts too
            self._aftermath.summary(self._watched + (self._aftermath.through >= self.step_count))
            self._guard(self._silent.at_end, self._history)

    def begin_forward(self, module: torch.nn.Module, args: Any) -> None:
        """Capture the model's forward already running (a watch attached from inside it: ``attach``, from
        a global forward pre-hook); its keyword arguments are taken when it returns."""
        if self._loop is not None:
            self._loop.begin_running(module, args)

    def _at_exit(self) -> None:
        self.close(flush=False)

    def step(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as training step ``self.step_count`` under the sentinel."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        windowed = self.every > 1 and self._windowed()
        rng, probing = self._rngs.before()
        ctx = StepContext(self.step_count, fn, args, kwargs, rng,
                          self._buffers.clone() if windowed else self._buffers.save())
        if windowed:
            self._guard(self._track, ctx)
        if self._mode == "manual":
            with torch.no_grad():
                torch._foreach_copy_(self._param_store, self._params)
        elif self._mode is None:
            self._param_store = [p.detach().clone() for p in self._params]
        self._ctx = ctx
        if self._loop is not None:  # steps are handed over: the step function is re-run, not the model's
            self._loop.remove()     # forwards, so the unchanged loop's hooks go (a hooked module calls slower)
            self._loop = None
            self._untap()
            self._untap = listen(self._backward_loss)
        try:
            result = fn(*args, **kwargs)
            if probing:  # which RNGs the step itself draws from
                self._rngs.after(ctx.rng)
            loss = loss_of(result)
            self._last_loss = (ctx.index, loss)
            if loss is not None:
                self._history.append(loss)
                step, running = self._running_loss
                if step != ctx.index or running is None or not same_value(loss, running):  # else checked when
                    self._guard(self._sentinel.observe_value, loss, ctx.index)         # handed to backward()
            if not ctx.checked and self._mode is None and self._params_changed():
                self._mode = "manual"
            if not ctx.checked and self._mode == "manual":
                self._guard(self._check, ctx.index, ctx)
            elif not ctx.checked and self._mode == "optimizer":
                self._unstepped(ctx.index, ctx)
            return result
        finally:
            self._ctx, self._last_ctx = None, ctx
            self.step_count = ctx.index + 1
            self._watched += 1

    def note_loss(self, value: float) -> None:
        """A loss seen by ``break_if`` inside this watch: the reports' loss history when watch sees none itself
        (in the unchanged loop, taken at the step's end unless a loss reached backward())."""
        if self._ctx is None:
            self._noted = value
        elif self._last_loss[1] is None:
            self._history.append(value)

    def adopt(self, report: Report) -> None:
        """A ``break_if`` inside this watch fired: complete its report and bundle the step now running."""
        self._guard(self._enrich, report, None)
        self._bundle(report, self._guard(self._source_now))
        self.reports.append(report)

    def _source_now(self) -> Source | None:
        """The step to bundle now: the w.step running (or the last one), else the unchanged loop's capture."""
        ctx = self._ctx or self._last_ctx or self._loop_context()
        return Source(ctx, None, None) if ctx is not None else None

    # ------------------------------------------------------------ every > 1: the replay window
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
    def _before_update(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        if self._replaying:
            self._after_hook()
            return None  # a window's earlier steps run again as they ran, updates included
        if self._rerunning:
            raise StopRerun()  # localization re-runs forward and backward, never the update
        if (self._untap_done is not None or self._shared) and self._stepped_already(optimizer):
            return None  # the backward() before it, or another optimizer's hook, checked this step and ended it
        if self._scaler_probes < SCALER_PROBE_STEPS:
            self._guard(self._silent.early_update, self._scaler_probes, self._inner, optimizer, self._params,
                        self.step_count, closure_of(args, kwargs) is not None)
            self._scaler_probes += 1
            if self.scaler is None:
                self.scaler = scaler_calling(optimizer)
        ctx = self._ctx or (self._handed_over() if self._loop is None else None)
        if ctx is not None:
            if self._post_hook is None:
                self._after_hook()  # ctx.updated is set once the update has run
            ctx.checked = True
            ctx.optimizer = self._stepper = optimizer
            self._mode, self._param_store = "optimizer", None
        closure = closure_of(args, kwargs) if len(args) > 1 or kwargs else None  # args[0]: the optimizer
        if closure is not None:  # LBFGS & co: the gradients are computed inside step(), by the closure
            if ctx is None and self._step_losses:
                self._guard(self._check_accumulated, optimizer)
            self._after_hook()
            return self._checked_closure(optimizer, closure, args, kwargs, ctx)
        if ctx is None and self._post_hook is None and self._plain_update():
            return None  # an unchanged loop's ordinary step: done
        if ctx is None:
            self._take_loop_losses()
        self._guard(self._check, ctx.index if ctx else self.step_count, ctx)
        if self._post_hook is None:  # the update follows with nothing of watch before its end
            self._after_update(optimizer, args, kwargs)
        return None

    def _after_hook(self) -> None:
        """From now on, do the work after an update in a post-step hook (added to this step's, too: torch
        reads the post-hooks once the update has run)."""
        if self._post_hook is not None:
            return
        if self.optimizer is not None:
            self._post_hook = self.optimizer.register_step_post_hook(self._after_update)
        else:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._post_hook = register_optimizer_step_post_hook(self._after_update)
        self._handles.append(self._post_hook)

    def _after_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._joined is not None:
            self._end_join()
        ctx, self._adopted = self._ctx or self._adopted, None
        if ctx is not None:
            ctx.updated = True
        elif not self._replaying:
            self.step_count += 1  # a plain loop: count optimizer steps
            self._watched += 1
        if self._loop is not None:
            self._loop.stepped()
            self._loop.enabled = True

    def _checked_closure(self, optimizer: Any, closure: Callable[[], Any], args: Any, kwargs: Any,
                         outer: StepContext | None) -> tuple[Any, Any]:
        """The closure, checked each time the optimizer evaluates it: before the update that uses its gradients."""
        index = outer.index if outer is not None else self.step_count

        def checked() -> Any:
            if self._rerunning or self._replaying:
                return closure()
            ctx = StepContext(index, closure, (), {}, capture_rng(), self._buffers.clone(), checked=True,
                              optimizer=optimizer, outer=outer, closure=True)
            before = self._guard(self._closure_begins) or 0
            loss = closure()
            value = self._guard(self._closure_ends, ctx, loss, before)
            if value is not None:
                self._last_loss = (index, value)
                self._history.append(value)
                self._guard(self._sentinel.observe_value, value, index)
            self._guard(self._check, index, ctx)
            return loss

        if "closure" in kwargs:
            return args, {**kwargs, "closure": checked}
        return (args[0], checked, *args[2:]), kwargs  # args[0] is the optimizer itself

    # ------------------------------------------------------------ checks
    def _check(self, index: int, ctx: StepContext | None) -> None:
        """Observe this step's gradients, read the sentinel when due. Callers guard it (``_guard``)."""
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        found = self._sentinel.check_params(self._groups, index)
        windowed = ctx is not None and self.every > 1 and self._windowed()
        renew = found is False and (self._window is not None or windowed)
        if found or renew:  # a clean read renews a replay window
            self._read_and_fire(index, ctx)
        elif found is False:
            self._latched = False  # clean again: the next failure is news
        if not self._inner.training and not self._silent.eval_said:  # model.eval() with no model.train() after it
            self._guard(self._silent.in_eval_mode, self._inner, index, self._loop)
        if index < 3 or not index % running_total.EVERY:  # (early: the buffers a module registers at a first forward)
            self._guard(taken_in, self._buffers, self._sentinel, self._params)
            if index and not index % running_total.EVERY:
                self._guard(self._silent.now_and_then, index, self.optimizer, self._params, self._inner, self._history)

    def _unstepped(self, index: int, ctx: StepContext | None) -> None:
        """A step ended without an update: a GradScaler skipped it, or gradients accumulate. Its gradients may
        hold Inf on purpose (the scaler's skip); only a collapsing scale or a non-finite loss fires."""
        scaler = self.scaler
        if scaler is not None and not self._latched:
            scale = self._guard(scaler.get_scale)
            if isinstance(scale, float) and scale < MIN_SCALE:
                self._guard(self._fire_scaler, scale, index, ctx)
                return
        if self._sentinel.due():
            self._guard(self._read_and_fire, index, ctx)
