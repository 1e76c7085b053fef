"""Triggers on a program nobody edited: ``tensor-dap run --break-on-nan / --loss-above X / --guard``.

Written against the public ``watch`` and ``break_if``; what it adds is *finding* their arguments:

- The optimizer: a global optimizer step pre-hook sees every ``torch.optim`` optimizer at its first ``step()``.
- The model: until that first step a global forward pre-hook notes which modules ran, and ``attach`` (the one way to
  find a model from its optimizer) picks it among them and attaches ``watch`` before the update of that first step. The
  forward hook is then removed, so later steps pay only for ``watch``.
- The loss: the scalar tensor ``.backward()`` is called on (``loss_tap``); a GradScaler's scaled loss is traced back to
  the loss it scaled, so thresholds compare the real value.

Until a watch is attached the loss is checked for NaN/Inf at each ``.backward()``. A first ``backward()`` with no
``torch.optim`` optimizer created yet is a loop that updates its parameters by hand: the root module that ran holding
most trainable parameters gets a ``watch`` without an optimizer, which checks the gradients as each ``backward()``
returns. It is usually the first module called with gradients on, and is then watched from inside that first forward, so
that step 0 is captured too (an optimizer made before the first backward() ends that watch). Where no watch can apply
(parameters no called module holds) the loss check stays on for the whole run instead.
"""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from collections.abc import Collection
from typing import Any, Callable, Optional

import torch

from ..console import note
from ..debug.frames import name_of
from .auto_replay import ReplayAtStart, replays_at_backward
from .break_if import break_if
from ..dynamo import global_forward_pre_hook
from .loss_tap import listen
from .optimizer_call import closure_of
from .step_loss import WHO, StepLoss
from .stop import guarded

log = logging.getLogger("tensor_dap.triggers")
EARLY_FORWARDS = 8  # calls of a model watched from its first forward before a backward() must come (see above)


class AutoTriggers(ReplayAtStart):
    """The triggers ``tensor-dap run`` switched on; ``close()`` removes every hook and wrapper."""

    def __init__(self, *, nan: bool = False, loss_above: Optional[float] = None,
                 ranks: Optional[Collection[int]] = None, on: str = "auto", replay: Optional[str] = None,
                 trusted: bool = False) -> None:
        self.nan, self.loss_above, self.ranks, self.on, self.replay = nan, loss_above, ranks, on, replay
        self.trusted = trusted  # --trust: the bundle's Python objects may be unpickled
        self._attachments: list[Any] = []
        self.steps = 0  # training steps so far, by optimizer steps: the step number break_if reports (``_after_step``)
        self._round: set[Any] = set()  # the optimizers that stepped since the step began
        self.backwards = 0  # .backward() calls on a loss: the step number when no optimizer ever steps
        self._seen: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self._unwatched: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # its model never ran
        self._closing: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # first step, with a closure
        self._loss_nan = False  # checking the loss for NaN at .backward(): watch could not apply
        self._handles: list[Any] = []
        self._restore: list[tuple[Any, str, Any]] = []
        self._untap: Optional[Callable[[], None]] = None
        self._by_hand: Any = None  # the watch of a loop with no torch.optim optimizer (``_watch_by_hand``)
        # made at the first forward with gradients on while no optimizer exists (``_watch_first_forward``), so that
        # step 0 of a loop updating by hand is captured; kept once the first backward() finds the same model
        self._tentative = nan and not replay  # that first forward may still come
        self._early_calls: Optional[int] = None  # calls of such a watch's model so far, until a backward() confirms it
        self._replayed = False  # --replay ran (or was said not to)
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_post_hook(self._after_step))
        self._step_loss = StepLoss(loss_above, lambda: self.steps, on, ranks) if loss_above is not None else None
        if self._step_loss is not None:
            self._handles.append(register_optimizer_step_pre_hook(self._step_loss.before_update))
        if nan or replay:
            self._forward = global_forward_pre_hook(self._note_module)
            self._handles.append(register_optimizer_step_pre_hook(self._before_step))
        if nan and not replay:
            self._see_new_optimizers()
        self._read_losses()  # until a watch is attached (or for good, without torch.optim), the loss is checked

    @property
    def watches(self) -> list[Any]:
        """The watches attached so far (one per optimizer whose model has run)."""
        found = [a.watch for a in self._attachments if a.watch is not None and not a.shared]
        return found + [self._by_hand] if self._by_hand is not None else found

    def close(self) -> None:
        if self.replay and not self._replayed:  # never silent: the program ended before anything to replay at
            self._replayed = True
            note(f"tensor_dap: --replay: the program ended before a step to replay it at: {self.replay} was "
                 "not replayed")
        elif ((self.nan or self.loss_above is not None) and not (self.steps or self.backwards) and self._handles
              and not any(w.reports for w in self.watches)):  # (a crash in the first forward, explained: checked)
            note("tensor_dap: no backward() or optimizer step ran in this process before it ended, so nothing was "
                 "checked (a program that stopped early; or training in child processes, e.g. "
                 "torch.multiprocessing with spawn, which is not watched)")
        for a in self._attachments:
            _quietly(a.close)
        self._attachments.clear()
        if self._by_hand is not None:
            _quietly(self._by_hand.close)
            self._by_hand = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stop_noting()
        if self._untap is not None:
            self._untap()
            self._untap = None
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()

    def __enter__(self) -> AutoTriggers:  # noqa: PYI034 - no typing_extensions dependency
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ finding model and optimizer
    def _see_new_optimizers(self) -> None:
        """Wrap ``Optimizer.__init__``: each optimizer is attached when it is created, so the model is
        watched from its first forward and even a NaN in the first step is localized."""
        original = torch.optim.Optimizer.__init__

        @functools.wraps(original)
        def init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if optimizer not in self._optimizers:
                self._optimizers.add(optimizer)
                if self._by_hand is not None and (self._early_calls is not None or self._takes_over(optimizer)):
                    # its model has an optimizer after all (or a forward ran before the optimizer was made: not a
                    # loop updating by hand): the optimizer's watch follows
                    _quietly(self._by_hand.close)
                    self._by_hand = None
                self._tentative, self._early_calls = False, None
                try:
                    self._attachments.append(self._attach_to(optimizer, seen=None))
                except Exception as exc:  # noqa: BLE001 - never stop the program from building its optimizer
                    log.warning("tensor_dap: could not attach watch to %s (%s: %s)", type(optimizer).__name__,
                                type(exc).__name__, exc)

        self._restore.append((torch.optim.Optimizer, "__init__", original))
        torch.optim.Optimizer.__init__ = init

    def _attach_to(self, optimizer: torch.optim.Optimizer, seen: Any) -> Any:
        from .attach import attach

        return attach(optimizer, seen=seen, ranks=self.ranks, on=self.on)

    def _note_module(self, module: torch.nn.Module, args: Any) -> None:
        try:
            self._seen.add(module)
        except TypeError:  # an unhashable module (a custom __eq__ without __hash__): it cannot be a key
            pass
        if (self._tentative or self._early_calls is not None) and torch.is_grad_enabled():
            try:
                self._early_forward(module, args)
            except Exception as exc:  # noqa: BLE001 - never stop the program's forward: the first backward() watches
                log.debug("tensor_dap: no watch from the first forward of %s: %r", type(module).__name__, exc)
                self._tentative = False
                self._drop_early()

    def _early_forward(self, module: torch.nn.Module, args: Any) -> None:
        """A forward with gradients on before any backward(): the first one watches its module; the watch is given
        up when its model runs ``EARLY_FORWARDS`` times with no backward() (evaluation with gradients on, inference:
        no loop updating by hand, and a capture nobody needs)."""
        if self._early_calls is None:
            self._watch_first_forward(module, args)
        elif module is self._by_hand.model:
            self._early_calls += 1
            if self._early_calls > EARLY_FORWARDS:
                self._drop_early()

    def _drop_early(self) -> None:
        if self._early_calls is not None and self._by_hand is not None:
            _quietly(self._by_hand.close)
            self._by_hand = None
        self._early_calls = None

    def _watch_first_forward(self, module: torch.nn.Module, args: Any) -> None:
        """The first module called with gradients on that holds trainable parameters, while no optimizer exists: the
        outermost of a forward (global pre-hooks run outside in). It is watched from inside this forward, as a loop
        updating by hand would be, so a NaN in its very first step is localized; the first backward() confirms it
        (or watches the model it finds instead) and an optimizer made before then ends it (``attach`` follows)."""
        trainable = [p for p in module.parameters() if p.requires_grad]
        if not trainable:
            return  # a parameter-free wrapper, a loss module: the model is called next
        self._tentative = False  # one try: the first backward() watches the model as before if this fails
        if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in trainable):
            return  # a lazy module's first call: its parameters are made inside it
        from .watch import watch

        self._by_hand, self._early_calls = watch(module, on=self.on, ranks=self.ranks), 1
        self._by_hand.begin_forward(module, args)  # its own capture missed the call already running

    def _stop_noting(self) -> None:
        forward = getattr(self, "_forward", None)
        if forward is not None:
            forward.remove()
            self._forward = None

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer in self._optimizers:
            self._stop_noting()  # every optimizer since start-up is known from its creation
            if closure_of(args, kwargs) is None:
                self._first_step_of(optimizer)
            else:  # LBFGS & co: the model runs inside step(), in the closure: known once the step is over
                self._closing.add(optimizer)
            return
        self._optimizers.add(optimizer)
        if self.replay:
            self._replay_at_step(optimizer, closure_of(args, kwargs))
        if self._by_hand is not None and self._takes_over(optimizer):
            self._early_calls = None
            return  # made before tensor_dap began: the watch its first backward() found becomes this optimizer's
        try:
            self._attach(optimizer)
        except Exception as exc:  # noqa: BLE001 - a failure here must never stop the program's step
            log.warning("tensor_dap: could not attach watch to %s (%s: %s); checking the loss instead",
                        type(optimizer).__name__, type(exc).__name__, exc)
            self._fall_back_to_loss()
        finally:
            self._stop_noting()  # the model is known (or never will be): later steps pay nothing for it

    def _first_step_of(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer attached at its creation steps: if its model never ran, its loss is checked instead."""
        attached = next((a for a in self._attachments if a.optimizer is optimizer), None)
        if attached is None or attached.watch is not None or optimizer in self._unwatched:
            return
        attached.close()  # its hook on every module's call goes: none will be found now (SAC's [log_alpha]: 30 %)
        again = self._attach_to(optimizer, seen=list(self._seen))  # its model ran before it was made (Pyro makes
        if again.watch is not None:  # its optimizers inside the first step, after the guide ran): watched from now
            self._attachments[self._attachments.index(attached)] = again
            return
        self._unwatched.add(optimizer)
        name = f" ({held})" if (held := name_of(optimizer, sys._getframe(1))) else ""  # as the program holds it
        self._fall_back_to_loss(f"no module run with gradients holds the parameters of {type(optimizer).__name__}"
                                f"{name}")

    def _attach(self, optimizer: torch.optim.Optimizer) -> None:
        attached = self._attach_to(optimizer, seen=list(self._seen))
        self._attachments.append(attached)
        model, others = (attached.watch.model if attached.watch else None), attached.others
        name = type(optimizer).__name__
        if model is None:
            self._fall_back_to_loss(f"no module that ran a forward holds the parameters of {name}")
            return
        if others:
            note(f"tensor_dap: --break-on-nan: {name} also updates {', '.join(type(m).__name__ for m in others)}; "
                 f"watching {type(model).__name__}, the module holding most of its parameters")
        # The watch's own pre-step hook is registered now, inside this step's hooks: torch calls it
        # for this very step, so the first update is checked too.

    def _fall_back_to_loss(self, why: Optional[str] = None) -> None:
        """Check the loss at .backward() from now on; ``why`` is said the first time only (Pyro makes one optimizer
        for each parameter: one line, not one each)."""
        if why is not None and not self._loss_nan:
            note(f"tensor_dap: --break-on-nan: {why}; checking the loss at .backward() for NaN/Inf instead")
        self._loss_nan = True
        self._read_losses()

    def _after_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        # A step ends when an optimizer steps again: several in one step (a GAN's two; Pyro's, one per parameter;
        # SAC's three) count once, as the program's loop does
        if optimizer in self._round or not self._round:
            self.steps += 1
            self._round = {optimizer}
        else:
            self._round.add(optimizer)
        if self._step_loss is not None:
            self._step_loss.after_update()
        if optimizer in self._closing:
            self._closing.discard(optimizer)
            self._first_step_of(optimizer)
            for w in self.watches:  # attached inside this step's closure, after its pre-step hook
                if w.optimizer is optimizer:
                    w.step_count = max(w.step_count, self.steps)

    # ------------------------------------------------------------ the loss
    def _read_losses(self) -> None:
        """Check each loss handed to ``backward()`` (``loss_tap``: through GradScaler's scaling too), once."""
        if self._untap is None:
            self._untap = listen(self._check_loss)

    def _check_loss(self, loss: torch.Tensor) -> None:
        self.backwards += 1
        if self.backwards == 1:
            self._first_backward()
        # Once a watch runs, NaN is its job (one report, not two). --replay alone checks nothing of the run it
        # replays in: its first step may be the failing one, and the replay must reach it.
        nan = self._loss_nan or (not self.watches and (self.nan or self.loss_above is not None))
        step = self.steps if self.steps else self.backwards - 1
        if nan:
            guarded(WHO, break_if, loss, above=None, nan=True, step=step, on=self.on, ranks=self.ranks)
        if self._step_loss is not None:  # the threshold: on the step's loss (``step_loss``)
            self._step_loss.backward(loss, step)

    def _first_backward(self) -> None:
        """No optimizer made yet (``--break-on-nan``), or a bundle with none (``--replay``): a loop updating by hand."""
        if self.replay:
            if replays_at_backward(self.replay):
                self._stop_noting()
                self._replay(None)
        elif self.nan and not self._optimizers:
            self._watch_by_hand()

    def _watch_by_hand(self) -> None:
        """The first backward() came with no torch.optim optimizer made: the loop updates its parameters by hand.
        Its model is the root module that ran holding most trainable parameters: usually the one watched since
        its first forward (``_watch_first_forward``), which captured this step; another one is watched from this
        backward() on, and a NaN in this first step is then reported without its birthplace.
        (An optimizer made before tensor_dap began, stepping after all, takes that watch over.)"""
        from .attach import find_model
        from .watch import watch

        model, _ = find_model(list(self._seen), None)
        self._tentative = False
        if self._by_hand is not None and self._by_hand.model is not model:
            self._drop_early()  # the first module called was not the one trained
        self._early_calls = None  # (confirmed)
        if model is None:
            return
        if self._by_hand is None:
            try:
                self._by_hand = watch(model, on=self.on, ranks=self.ranks)
            except Exception as exc:  # noqa: BLE001 - the loss check stays on
                log.warning("tensor_dap: could not watch %s (%s: %s)", type(model).__name__, type(exc).__name__,
                            exc)
                return
        self._stop_noting()
        note(f"tensor_dap: --break-on-nan: .backward() with no torch.optim optimizer made: watching "
             f"{type(model).__name__} as a loop updating it by hand (its gradients checked as each .backward() "
             "returns, until an optimizer steps)", style="")

    def _takes_over(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` updates the model watched since the first backward() (``_watch_by_hand``)."""
        from .attach import find_model

        return find_model([self._by_hand.model], optimizer)[0] is not None


def _quietly(fn: Any) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - closing at exit: a report was already given
        log.debug("tensor_dap: %s", exc)
