"""Public exceptions: what a trigger raises when nobody can stop in a debugger, and a usage mistake.

A trigger's exception carries the full report (``.report``), so a batch job's traceback
already says which step, phase and module went wrong and where the incident bundle was
written. ``UsageError`` is a mistake in how a command was called: one line, exit code 2.
"""

from __future__ import annotations

import bdb
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


# What tensor_dap's guards around its own code pass on instead of swallowing: a trigger stopping the run
# on purpose, the user quitting the debugger a trigger opened.
STOPS: tuple[type[BaseException], ...] = (TriggerError, bdb.BdbQuit)


class UsageError(Exception):
    """A mistake in how a command was called: reported in one line, exit code 2."""
