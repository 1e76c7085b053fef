"""Named exceptions a training trigger raises when nobody can stop in a debugger.

Each carries the full report (``.report``), so a batch job's traceback already says
which step, phase and module went wrong and where the incident bundle was written.
"""

from __future__ import annotations

from typing import Any


class TriggerError(RuntimeError):
    """A training trigger fired; ``.report`` holds the structured report."""

    def __init__(self, message: str, report: Any | None = None) -> None:
        super().__init__(message)
        self.report = report


class NonFiniteError(TriggerError):
    """A NaN/Inf appeared in the loss, an activation, a gradient or a parameter.

    Read the report for the first module and phase; replay the bundle it names with
    ``tensor_dap.replay`` to reproduce the step under the debugger.
    """


class LossThresholdError(TriggerError):
    """The loss crossed a threshold given to ``break_if`` (above, below, or a spike)."""
