"""Where a fired trigger goes: the VS Code debugger, tensor_dap's pdb, a log line, or an exception.

``on="auto"`` picks the place the user is actually looking at (``tensor_dap.attached``);
under ``torch.distributed`` only the ranks in ``ranks`` may stop, the others log and go on
(they then wait at the next collective for the rank being debugged, after saying so).
"""

from __future__ import annotations

import bdb
import sys
from collections.abc import Collection
from typing import Any

from ..dap import attached
from ..dist import may_stop
from ..errors import TriggerError
from .report import Report, emit, logger, to_text

MODES = ("auto", "break", "raise", "log")


def check_mode(on: str) -> str:
    if on not in MODES:
        raise ValueError(f"on={on!r}: expected one of {', '.join(map(repr, MODES))}")
    return on


def dispatch(report: Report, *, on: str, error: type[TriggerError], ranks: Collection[int] | None = None,
             culprit: dict | None = None) -> None:
    """Send the report where ``on`` says. Raises ``error`` for "raise" (and "auto" with nobody to ask)."""
    culprit = culprit or {}
    if on == "log":
        emit(report)
        return
    if on in ("auto", "break") and not may_stop(report.rank, ranks):
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


def stop_in_debugger(report: Report, *, how: str, module: Any = None, inputs: Any = None,
                     output: Any = None, **extra: Any) -> None:
    """Stop *in this frame*: its locals are what the user inspects (module, inputs, output, step, report).

    debugpy.breakpoint() stops at the line after the call in the caller's frame, which is this
    one; pdb is opened on this frame for the same reason. ``up`` leads back to the training loop.
    """
    # Unused here on purpose: these locals are what the debugger shows.
    step = report.step  # noqa: F841
    grad_input, grad_output = extra.get("grad_input"), extra.get("grad_output")  # noqa: F841
    loss = extra.get("loss")  # noqa: F841
    if how == "dap":
        _break_into_dap(sys._getframe())
    else:
        _open_pdb(sys._getframe(), report)
    return None  # noqa: RET501, PLR1711 - the debugger stops on this line, culprit in the locals


def _break_into_dap(frame: Any) -> None:
    """Stop the DAP client in ``frame`` (what debugpy.breakpoint() does for its caller's frame).

    With VS Code's default justMyCode, pydevd never stops in library code, which tensor_dap is
    once installed into site-packages: then the stop goes to the nearest user frame up the
    stack (the training step, on the line after the optimizer call) instead of being lost,
    with the report in the debug console.
    """
    attached.break_into_dap(_first_shown_frame(frame))


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
    except Exception:  # noqa: BLE001 - unknown pydevd: assume our frame is shown
        return frame


def _open_pdb(frame: Any, report: Report) -> None:
    header = f"{report.headline} (step {report.step}); `up` returns to your training loop"
    try:
        from ..debug.session import set_trace

        set_trace(frame, header=header)
        return
    except bdb.BdbQuit:  # the user quit the debugger: that ends the program, as in pdb
        raise
    except Exception as exc:  # noqa: BLE001 - fall back to the standard debugger, never skip the stop
        logger.debug("tensor_dap.debug failed (%r); opening pdb", exc)
    import pdb  # noqa: T100 - opening a debugger is the point

    pdb.Pdb().set_trace(frame)
