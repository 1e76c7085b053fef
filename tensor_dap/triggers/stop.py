"""Where a fired trigger goes: the VS Code debugger, tensor_dap's pdb, a log line, or an exception.

``on="auto"`` picks the place the user is actually looking at (``tensor_dap.attached``);
under ``torch.distributed`` only the ranks in ``ranks`` may stop, the others log and go on
(they then wait at the next collective for the rank being debugged, after saying so).
"""

from __future__ import annotations

import bdb
import functools
import linecache
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Callable

from ..dap import attached
from ..debug.frames import offer_package, user_frame
from ..dist import may_stop
from ..errors import STOPS, TriggerError
from ..format import printable
from ..libraries import is_user_file, library_of
from .loss_tap import listen
from .report import Report, emit, logger, to_text

MODES = ("auto", "break", "raise", "log")


def guarded(who: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn``, tensor_dap's own code run inside the user's program: a trigger stopping the run on purpose
    (``STOPS``) passes, any other failure is a warning from ``who`` and None, never the program's."""
    __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
    try:
        return fn(*args, **kwargs)
    except STOPS:  # (KeyboardInterrupt is no Exception: it passes too)
        raise
    except Exception as exc:  # noqa: BLE001 - tensor_dap's failure must not stop training
        logger.warning("%s: internal error, check skipped: %s: %s", who, type(exc).__name__, exc)
        return None


def listen_guarded(fn: Callable[[Any], None], *, done: bool = False) -> Callable[[], None]:
    """``loss_tap.listen`` for one of ``watch``'s checks: a failure of ``fn`` is a warning, never the program's."""
    return listen(functools.partial(guarded, "tensor_dap.watch", fn), done=done)


def check_mode(on: str) -> str:
    if on not in MODES:
        raise ValueError(f"on={on!r}: expected one of {', '.join(map(repr, MODES))}")
    return on


def dispatch(report: Report, *, on: str, error: type[TriggerError], ranks: Collection[int] | None = None,
             culprit: dict | None = None) -> None:
    """Send the report where ``on`` says. Raises ``error`` for "raise" (and "auto" with nobody to ask)."""
    __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
    culprit = culprit or {}
    if on == "log":
        emit(report)
        return
    if on in ("auto", "break") and not may_stop(report.rank, ranks) and not (
            on == "auto" and ranks is None and attached.nobody_can_debug()):  # (a batch job: every rank raises)
        report.notes.append(f"rank {report.rank} may not stop (ranks={sorted(ranks) if ranks else [0]}): "
                            "logging and continuing; it waits at the next collective while the "
                            "debugged rank is stopped")
        emit(report)
        return
    if on in ("auto", "break"):
        where = {"dap": "dap", "terminal": "pdb"}.get(attached.watching() or "")
        if where is not None:
            emit(report)
            stop_in_debugger(report, how=where, **culprit)
            return
        if on == "break":
            report.notes.append("on='break' but no DAP client is attached and stdin is not a terminal")
    emit(report, show=False)  # the log gets it; the exception's message shows it
    raise error(to_text(report), report)


@dataclass(frozen=True)
class Culprit:
    """What the last trigger found, for the debugger: ``tensor_dap.culprit()`` in the frame it stopped in."""

    report: Report
    step: int | None = None
    module: Any = None
    inputs: Any = None
    output: Any = None
    grad_input: Any = None
    grad_output: Any = None
    loss: Any = None
    parameter: Any = None
    grad: Any = None


_last: list[Culprit] = []


def culprit() -> Culprit | None:
    """While the debugger is stopped by a trigger, what it found: ``.module``, ``.inputs``, ``.output``,
    ``.grad_input``/``.grad_output`` (backward), ``.loss``, ``.report``; None otherwise."""
    return _last[-1] if _last else None


def stop_in_debugger(report: Report, *, how: str, **found: Any) -> None:
    """Stop in the user's own frame (the training loop or step function that is running now).

    torch's and tensor_dap's frames are hidden from the terminal debugger's ``where``/``up``/
    ``down``; VS Code gets the same frame selected. The culprit is reachable through
    ``tensor_dap.culprit()`` while stopped. The stop happens now, before the optimizer applies the update.
    """
    fields = {k: v for k, v in found.items() if k in Culprit.__dataclass_fields__}
    _last[:] = [Culprit(report, **{"step": report.step, **fields})]
    frame = stop_frame(sys._getframe(1))
    offer_package(frame)  # ``tensor_dap.culprit()``, as the stop says, in a program that never imported tensor_dap
    try:
        if how == "dap":
            _break_into_dap(frame)
        else:
            _open_pdb(frame, report)
    finally:
        _last.clear()  # the culprit's tensors (activations) are not kept alive once training goes on


def stop_frame(frame: Any) -> Any:
    """The frame a stop from a hook running in ``frame`` opens in: the user's, the loop that stepped."""
    return _training_loop(user_frame(frame) or frame)


def _training_loop(frame: Any) -> Any:
    """``frame``, or past the ``step`` methods of libraries' optimizer wrappers (accelerate's, Lightning's) that
    call the real optimizer: the stop lands in the loop that stepped, where the batch and the model are."""
    try:
        f = frame
        while f is not None and f.f_code.co_name == "step" and not is_user_file(f.f_code.co_filename) \
                and _steps_an_optimizer(f.f_locals.get("self")):
            f = user_frame(f.f_back)
        return _holding_the_batch(f) if f is not None else frame
    except Exception:  # noqa: BLE001 - an odd frame: stop where the hook was called
        return frame


BATCH_NAMES = ("batch", "inputs")  # Lightning's loop and HF's Trainer's call the batch so
TRAINER_DEPTH = 24  # library frames looked through for the one holding the batch


def _holding_the_batch(frame: Any) -> Any:
    """A trainer's frame that calls the optimizer with no batch in reach (Lightning steps through its precision
    plugin, its strategy and its module's hook, seven frames below the loop holding ``batch``): the nearest
    library frame above it that holds the batch, without going past the user's own code; else ``frame``."""
    f = frame
    for _ in range(1 + TRAINER_DEPTH):
        if f is None or is_user_file(f.f_code.co_filename):
            return frame
        if any(name in f.f_locals for name in BATCH_NAMES):
            return f
        f = user_frame(f.f_back)
    return frame


def _steps_an_optimizer(obj: Any) -> bool:
    from torch.optim import Optimizer

    return isinstance(obj, Optimizer) or any(isinstance(getattr(obj, name, None), Optimizer)
                                             for name in ("optimizer", "_optimizer"))


def _break_into_dap(frame: Any) -> None:
    """Suspend this thread in VS Code now, with ``frame`` as the top of the stack it shows.

    pydevd's ``settrace(stop_at_frame=...)`` would stop only when that frame runs its next line
    (after the optimizer applied the update); suspending through pydevd's own wait loop with the
    user's frame stops before it. Under ``justMyCode`` the frame must also be one pydevd shows.
    If that private entry point is missing, fall back to the public stop.
    """
    frame = _first_shown_frame(frame)
    try:
        import threading

        pydevd = sys.modules["pydevd"]
        from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
        from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

        py_db = pydevd.get_global_debugger()
        thread = threading.current_thread()
        info = set_additional_thread_info(thread)
        # As pydevd does for a stop made from user code: no trace events on this thread while it waits,
        # or evaluating the Variables would re-enter the suspension.
        monitoring = _suspend_monitoring()
        info.is_tracing += 1
        try:
            py_db.set_suspend(thread, CMD_SET_BREAK)
            py_db.do_wait_suspend(thread, frame, "line", None)
        finally:
            info.is_tracing -= 1
            if monitoring is not None:
                monitoring.resume_current_thread_tracing()
        return
    except Exception as exc:  # noqa: BLE001 - an unknown pydevd: its public stop still works
        logger.debug("tensor_dap: direct suspension failed (%r); using settrace", exc)
    attached.break_into_dap(frame)


def _suspend_monitoring() -> Any:
    """Under ``sys.monitoring`` (Python 3.12+), pause pydevd's events for this thread; the module to resume them."""
    from _pydevd_bundle.pydevd_constants import PYDEVD_USE_SYS_MONITORING

    if not PYDEVD_USE_SYS_MONITORING:
        return None
    from _pydevd_sys_monitoring import pydevd_sys_monitoring

    return pydevd_sys_monitoring if pydevd_sys_monitoring.suspend_current_thread_tracing() else None


def _first_shown_frame(frame: Any) -> Any:
    """``frame``, or the first caller pydevd does not filter out as library code."""
    try:
        py_db = sys.modules["pydevd"].get_global_debugger()
        if not py_db.is_files_filter_enabled:
            return frame
        f = frame
        while f is not None and py_db.apply_files_filter(f, f.f_code.co_filename, False):
            f = f.f_back
        return f if f is not None else frame
    except Exception:  # noqa: BLE001 - unknown pydevd: assume the frame is shown
        return frame


def _whose(frame: Any) -> str:
    """Whose code the debugger opens in, and, in a library's, at which call: its loop calling ``optimizer.step()``
    (HF's Trainer), or its own ``backward()`` call inside the step's closure (Lightning)."""
    owner = library_of(frame.f_code.co_filename)
    if owner is None:
        return "in your code"
    possessive = f"{owner}'" if owner.endswith("s") else f"{owner}'s"  # transformers' code, lightning's code
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"in {possessive} code, at {printable(line)}," if line else f"in {possessive} code"


def _open_pdb(frame: Any, report: Report) -> None:
    header = (f"{report.headline} (step {report.step}): stopped {_whose(frame)} before the update; "
              "tensor_dap.culprit() holds the module, its inputs and output")
    try:
        from ..debug.session import set_trace

        set_trace(frame, header=header, hide_library=True)
        return
    except bdb.BdbQuit:  # the user quit the debugger: that ends the program, as in pdb
        raise
    except Exception as exc:  # noqa: BLE001 - fall back to the standard debugger, never skip the stop
        logger.debug("tensor_dap.debug failed (%r); opening pdb", exc)
    import pdb  # noqa: T100 - opening a debugger is the point

    pdb.Pdb().set_trace(frame)
