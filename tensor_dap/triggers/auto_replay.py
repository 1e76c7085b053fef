"""``tensor-dap run --replay BUNDLE``: the program builds its model and optimizer as it always does, then the bundle's
step is re-run on them in place of its training. Mixed into ``auto.AutoTriggers``, whose state it reads."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch

from ..console import note


class ReplayAtStart:
    """Mixed into ``AutoTriggers``: the state it reads is the triggers' own (see its ``__init__``)."""

    replay: Optional[str]
    trusted: bool
    on: str
    _seen: Any
    _replayed: bool
    _stop_noting: Callable[[], None]

    def _replay_at_step(self, optimizer: torch.optim.Optimizer, closure: Optional[Callable[[], Any]]) -> None:
        """``--replay`` at the program's first optimizer step. LBFGS & co run the model inside step(), in the
        closure: one evaluation of it, here, shows which module the model is (the replay then restores every
        state the bundle has), and a bundle of such a step replays through that closure."""
        from .attach import find_model
        from .incident import BundleError, read_report

        if closure is not None and find_model(list(self._seen), optimizer)[0] is None:
            closure()
        self._stop_noting()
        try:
            by_closure = read_report(self.replay).mode == "closure"
        except BundleError:
            by_closure = False  # replay() says what is wrong with it
        self._replay(optimizer, closure if by_closure else None)

    def _replay(self, optimizer: Optional[torch.optim.Optimizer], closure: Optional[Callable[[], Any]] = None) -> None:
        """``--replay BUNDLE``: the program built its model and optimizer; re-run the bundle's step on them, then end.
        ``optimizer`` None: a bundle of a loop updating by hand, replayed at the program's first backward().

        It stops where the NaN was born, in the debugger the user is in; the program does not train on (exit code 0
        when the failure reproduced, 1 when the step ran clean)."""
        from ..errors import TriggerError
        from .attach import model_of
        from .incident import read_bundle
        from .parts import as_saved
        from .replay import replay

        self._replayed = True
        frame = sys._getframe(1)
        model, _ = model_of(self._seen, optimizer, frame)
        trains = f"the parameters of {type(optimizer).__name__}" if optimizer is not None else "parameters"
        if model is None:
            note(f"tensor_dap: --replay: no module that ran before the first step holds {trains}; nothing to "
                 "replay on")
            raise SystemExit(2)
        try:
            bundle = read_bundle(self.replay, trusted=self.trusted)
            model = as_saved(bundle.model_state or (), model, [model, *self._seen], frame)  # watched as parts?
            with_optimizer = f" and {type(optimizer).__name__}" if optimizer is not None else ""
            note(f"tensor_dap: replaying {self.replay} on the program's {type(model).__name__}{with_optimizer}",
                 style="")
            report = replay(bundle, model, closure, optimizer=optimizer, on=self.on)
        except TriggerError as exc:  # nobody to stop for: the report is shown, the program ends
            from .report import emit

            emit(exc.report)
            report = exc.report
        except ValueError as exc:  # not a bundle, or a watch.step bundle that needs its step function
            note(f"tensor_dap: --replay: {exc}")
            raise SystemExit(2) from None
        if report is None:
            note("tensor_dap: --replay: the step ran clean: the failure did not reproduce")
        raise SystemExit(0 if report is not None else 1)


def replays_at_backward(bundle: str) -> bool:
    """Whether ``bundle`` is replayed at the first backward(): an unchanged loop's step with no optimizer known
    (its report has no learning rate), from a loop updating by hand, which has no optimizer step to wait for;
    or a bundle whose report cannot be read, so that the replay says what is wrong with it now."""
    from .incident import BundleError, read_report

    try:
        report = read_report(bundle)  # bounded and validated: a bundle may come from anywhere
    except BundleError:
        return True
    return report.mode == "loop" and not report.lr
