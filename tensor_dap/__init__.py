"""tensor_dap: tensor-aware debugging for PyTorch.

The public API is re-exported here. Heavy parts load lazily so that importing
tensor_dap (for example from the debugpy plugin) never imports torch by itself.
"""

import importlib as _importlib  # (private names: dir(tensor_dap), what a notebook completes, lists the API)
from typing import Any as _Any

from .version import __version__

# name -> module that defines it; modules load on first attribute access
_EXPORTS = {
    "describe": "tensor_dap.summary",
    "summarize": "tensor_dap.summary",
    "TensorSummary": "tensor_dap.summary",
    "Budget": "tensor_dap.summary",
    "histogram": "tensor_dap.summary.histogram",
    # the objects around tensors (also what the Variables panel's Watch expressions call)
    "describe_module": "tensor_dap.summary.modules",
    "describe_optimizer": "tensor_dap.summary.objects",
    "describe_scheduler": "tensor_dap.summary.objects",
    "describe_loader": "tensor_dap.summary.objects",
    # the VS Code extension's tensor inspector (JSON strings, evaluated in the paused frame)
    "inspect_frame_json": "tensor_dap.dap.inspector",
    "inspect_tensor_json": "tensor_dap.dap.inspector",
    # training triggers
    "break_if": "tensor_dap.triggers.break_if",
    "watch": "tensor_dap.triggers.watch",
    "replay": "tensor_dap.triggers.replay",
    "culprit": "tensor_dap.triggers.stop",
    "attach": "tensor_dap.triggers.attach",
    "NonFiniteError": "tensor_dap.errors",
    "LossThresholdError": "tensor_dap.errors",
    # tensor-aware pdb
    "set_trace": "tensor_dap.debug.session",
    "post_mortem": "tensor_dap.debug.session",
    "install": "tensor_dap.debug.install",
    # profiling and training monitor
    "profile": "tensor_dap.profiling.marks",
    "step": "tensor_dap.profiling.marks",
    "Timer": "tensor_dap.profiling.timer",
    "timers": "tensor_dap.profiling.timer",
    "StepProfiler": "tensor_dap.profiling.step_profiler",
    "setup_logging": "tensor_dap.profiling.logs",
    "Monitor": "tensor_dap.profiling.monitor",
    # checks: each returns a CheckResult (prints as a rich table, .to_dict() for JSON)
    "check_shapes": "tensor_dap.checks",
    "check_devices": "tensor_dap.checks",
    "check_gradients": "tensor_dap.checks",
    "check_leakage": "tensor_dap.checks",
    "check_label_leakage": "tensor_dap.checks",
    "compare_state_dict": "tensor_dap.checks",
    "check_dataloader": "tensor_dap.checks",
    "doctor": "tensor_dap.checks",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tensor_dap' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))
