"""What an uncaught exception turns into: a report a person can act on, then the debugger.

The report is the traceback, the tensors of the failing frame (your code's innermost
frame), and for shape errors the operands of the failing line with their shapes. Then
the post-mortem debugger opens when someone is at a terminal; otherwise the process
exits non-zero as it would have anyway.
"""

from __future__ import annotations

import bdb
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from ..errors import TriggerError
from ..libraries import library_of
from . import load_errors, no_kernel, oom, overflow, torch_errors
from .frames import failing_frame, is_runner
from ..probe.shape_errors import ShapeExplanation, explain
from ..summary import TensorSummary

MAX_TENSORS = 16  # with the traceback and the explanation, a report fits on one screen
FULL_TRACEBACK = "TENSOR_DAP_FULL_TRACEBACK"


@dataclass(frozen=True)
class CrashReport:
    traceback: str
    frame: str  # "train.py:42 in step": where the tensors below live
    tensors: tuple[tuple[str, TensorSummary], ...]
    explanation: ShapeExplanation | None
    more_tensors: int = 0  # tensors of that frame left out past MAX_TENSORS
    hint: str = ""  # what tensor_dap can find out about this error if run another way
    advice: str = ""  # what tensor_dap found out about it (a checkpoint's keys: ``load_errors``; ``oom``)


# backward()'s errors that name no line of the program, and what a watch names for them (triggers.backward_errors)
_NAMED_UNDER_WATCH = {torch_errors.INPLACE: "the tensor, the op that changed it in place and its line",
                      torch_errors.SECOND_TIME: "the tensor that carries the freed graph and the line that handed it "
                                                "to the model, or the loss whose earlier backward() freed it",
                      torch_errors.NO_GRAPH: "which of the usual causes it is (a frozen model, a forward with "
                                             "gradients off, a loss taken off the graph)"}


def hint_for(exc: BaseException) -> str:
    """A way to learn more about ``exc`` that tensor_dap has and this run did not use ('' when none)."""
    try:
        text, notes = str(exc), " ".join(str(n) for n in getattr(exc, "__notes__", ()) or ())
    except Exception:  # noqa: BLE001 - an exception whose text cannot be read has no hint
        return ""
    if torch_errors.DEVICE_ASSERT in text:
        return ("tensor_dap: a CUDA kernel's check failed earlier than this line (kernels run asynchronously). Run it "
                "again with CUDA_LAUNCH_BLOCKING=1 to stop at that op, or on the CPU, where the check names the value "
                "(`tensor-dap run` then explains it): usually a class target >= the number of classes, an Embedding id "
                ">= its rows, or binary cross-entropy input outside [0, 1]")
    named = next((what for pattern, what in _NAMED_UNDER_WATCH.items() if pattern in text), None)
    if named is None or "tensor_dap:" in notes:
        return ""
    return ("tensor_dap: run it under a watch (tensor-dap run --guard, or `with tensor_dap.watch(model, optimizer):` "
            f"around the loop) and this error names {named}")


def _trim(tb: Any) -> Any:
    """Drop the leading frames of the runner (runpy, tensor_dap) so the traceback starts in the script."""
    while tb is not None and tb.tb_next is not None and is_runner(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def build_report(exc: BaseException, tb: Any = None) -> CrashReport:
    """Everything the report shows, as data; never raises for a broken tensor or an odd frame."""
    from ..probe.scan import reachable_tensors
    from ..summary import describe

    tb = _trim(tb if tb is not None else exc.__traceback__)
    text = collapsed_traceback(exc, tb)
    frame, lineno = failing_frame(tb)
    rows: tuple[tuple[str, TensorSummary], ...] = ()
    where, more = "", 0
    if frame is not None:
        where = f"{os.path.basename(frame.f_code.co_filename)}:{lineno} in {frame.f_code.co_name}"
        try:
            found, more = reachable_tensors(frame.f_locals, modules=False, limit=MAX_TENSORS)
            rows = tuple((name, describe(t)) for name, t in found)
        except Exception:
            rows = ()
    try:
        explanation = explain(exc, tb)
    except Exception:
        explanation = None
    return CrashReport(traceback=text, frame=where, tensors=rows, explanation=explanation, more_tensors=more,
                       hint=hint_for(exc),
                       advice=load_errors.advice(exc, tb) or oom.advice(exc, tb) or overflow.advice(exc, tb)
                       or no_kernel.advice(exc, tb))


def collapsed_traceback(exc: BaseException, tb: Any) -> str:
    """Python's traceback with each run of library frames (torch, the standard library, tensor_dap) folded
    into one line that says how many there were and where, so your own frames stand out, and so is the dispatch
    table that torch's "Could not run 'aten::op'" appends (90 lines). The frame that raised is always shown.
    ``TENSOR_DAP_FULL_TRACEBACK=1`` keeps every frame and line."""
    te = traceback.TracebackException(type(exc), exc, tb)
    if os.environ.get(FULL_TRACEBACK, "").strip() not in ("", "0"):
        return "".join(te.format())
    seen, todo = set(), [te]
    while todo:  # every exception in the chain (__cause__, __context__)
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = _Folded(t.stack, ours=t is te and isinstance(exc, TriggerError))
        todo += [c for c in (t.__cause__, t.__context__) if c is not None]
    return _fold_dispatch_table("".join(te.format()))


def _fold_dispatch_table(text: str) -> str:
    rows = list(no_kernel.DISPATCH_ROW.finditer(text))
    if len(rows) < 3:
        return text
    return (text[:rows[0].start()] + f"[... {len(rows)} lines of torch's dispatch table (the backends with a kernel) "
            f"hidden; {FULL_TRACEBACK}=1 shows them]\n" + text[rows[-1].end():])


class _Folded(traceback.StackSummary):
    """A stack whose runs of library frames format as one line. ``ours``: a trigger of tensor_dap stopped the
    run on purpose (its report follows), so tensor_dap's frame that raised folds too: the last line shown is
    the user's."""

    def __init__(self, frames: Any, ours: bool = False) -> None:
        super().__init__(frames)
        self._ours = ours

    def format(self) -> list[str]:
        out: list[str] = []
        run: list[Any] = []
        for i, fs in enumerate(self):
            library = library_of(fs.filename)
            if library is not None and (i < len(self) - 1 or self._ours and library == "tensor_dap"):
                run.append((fs, library))
                continue
            out += _fold(run)
            run = []
            out += traceback.StackSummary.from_list([fs]).format()
        return out + _fold(run)


def _fold(run: list[Any]) -> list[str]:
    if not run:
        return []
    if len(run) == 1:
        return traceback.StackSummary.from_list([run[0][0]]).format()
    where = ", ".join(dict.fromkeys(library for _, library in run))
    return [f"  [... {len(run)} frames in {where} hidden; {FULL_TRACEBACK}=1 shows them]\n"]


def print_report(exc: BaseException, tb: Any = None) -> None:
    """Print the report to stderr; on any failure of ours, Python's own traceback instead."""
    from ..console import say
    from .views import crash

    try:
        say(crash(build_report(exc, tb)), crop=False)  # tracebacks are never cut
    except Exception:
        traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def handle(exc: BaseException, tb: Any = None) -> int:
    """Report ``exc``, then open the post-mortem debugger if a person is there. Returns the exit code, 1."""
    from ..console import make_console
    from ..dap.attached import watching
    from .session import post_mortem

    print_report(exc, tb)
    tb = tb if tb is not None else exc.__traceback__
    who = watching()
    if who == "dap":
        return 1  # the IDE shows the exception itself
    if who == "terminal":
        post_mortem(_trim(tb))
    else:
        make_console(stderr=True).print("tensor_dap: stdin is not a terminal, so no post-mortem debugger; "
                                        "exiting with code 1", style="dim", soft_wrap=True)
    return 1


def excepthook(etype: type, value: BaseException, tb: Any) -> None:
    """sys.excepthook: the crash report and post-mortem for uncaught exceptions (not Ctrl-C)."""
    if issubclass(etype, bdb.BdbQuit):
        return  # `q` at a breakpoint ends the program; that is not a crash to report
    if issubclass(etype, (KeyboardInterrupt, SystemExit)) or not isinstance(value, BaseException):
        sys.__excepthook__(etype, value, tb)
        return
    try:
        handle(value, tb)
    except Exception:
        sys.__excepthook__(etype, value, tb)
