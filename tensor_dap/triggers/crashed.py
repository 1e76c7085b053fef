"""When the program crashes on a NaN first: ``watch`` names where it was born before the crash goes on.

The sentinel looks at the gradients before the update, but a non-finite value the forward made
often ends the program before that: torch's ``binary_cross_entropy`` refuses NaN probabilities
right after the forward (pytorch/examples' VAE and DCGAN), ``clip_grad_norm_(error_if_nonfinite=True)``
refuses a NaN gradient. When an exception leaves the watch (its ``with`` block, or the end of a
program under ``tensor-dap run``) in a step that has not updated yet and shows a non-finite value
(the model's outputs or the gradients, or a tensor in the frames the exception left), the step is
re-run from what it captured (the unchanged loop's forwards, or the ``w.step`` function) and
reported and bundled as a trigger would, without stopping: the crash then goes on as it would have.
"""

from __future__ import annotations

from typing import Any

from .capture import Source, StepContext
from .crash_outside import HEADLINE, frame_tensors, outside_finding, says_nonfinite, traceback_frames
from .held_now import nonfinite_parameters
from .localize import nonfinite
from .report import Report, emit
from .upstream import upstream


class CrashExplanation:
    """Mixed into ``watch``: the state it reads is the watch's own (see watch.__init__)."""

    def explain_crash(self, tb: Any = None, error: BaseException | None = None) -> Report | None:
        """The report of where this step's first non-finite value was born, or None when there is nothing to
        explain (every value finite, the step already reported or updated). ``tb``: the crash's traceback;
        ``error``: the exception (what it says tells a crash about a NaN the program made after the model)."""
        if self._latched or self._rerunning or self._replaying or self._ctx is not None:
            return None
        ctx = self._crashed_step(tb, error)
        if ctx is None:
            return None
        try:  # weights already non-finite (an earlier update, after a stop was continued): no op to find
            finding = nonfinite_parameters(self._inner, first_step=ctx.index == 0, optimizer=self._updater) \
                or self._rerun(ctx)
        except Exception:  # noqa: BLE001 - the re-run crashed as the program did, before any non-finite value
            return None
        outside = finding is None
        if outside:  # the model re-ran finite: the program's code after it made the value it crashed on
            finding = self._guard(outside_finding, tb, error)
            if finding is None:
                return None
        finding = self._guard(upstream, self, finding) or finding  # a batch another watched model made
        report = self._report(finding, ctx.index, ctx.index, None, headline=HEADLINE if outside else None)
        report.notes.append("found as the program crashed: this step's non-finite value came first (the crash "
                            "follows)")
        self._latched = True
        if outside:  # a bundle of the model's step would replay clean
            report.notes.append("no bundle: the model's step re-runs finite; the value was made after it")
            report.loss = None  # this step's loss was never computed: its history ends at the last one
        else:
            self._bundle(report, Source(ctx.outer or ctx, None, None))
        self.reports.append(report)
        emit(report)
        return report

    def _crashed_step(self, tb: Any, error: BaseException | None = None) -> StepContext | None:
        """The step the crash ended, if it can be re-run and something non-finite is there to find, or the crash says
        it met one (anomaly mode's "Function 'SqrtBackward0' returned nan values": backward stopped there, and
        nothing non-finite was kept)."""
        if self._loop is not None:
            ctx = self._loop_context()
            outputs = [] if ctx is None else [t for f in ctx.forwards for t in f.outputs()]
        else:  # w.step: the step function that raised
            ctx, outputs = self._last_ctx, []
        if ctx is None or ctx.updated:
            return None
        if says_nonfinite(error) or any(map(nonfinite, outputs)) or any(nonfinite(p.grad) for p in self._params) \
                or any(nonfinite(t) for *_, t in frame_tensors(reversed(traceback_frames(tb)))):  # innermost first
            return ctx
        return None

