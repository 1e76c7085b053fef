"""tensor_dap: tensor-aware debugging for PyTorch.

The public API is re-exported here. Heavy parts load lazily so that importing
tensor_dap (for example from the debugpy plugin) never imports torch by itself.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import __version__

# name -> module that defines it; modules load on first attribute access
_EXPORTS = {
    "describe": "tensor_dap.summary",
    "summarize": "tensor_dap.summary",
    "TensorSummary": "tensor_dap.summary",
    "Budget": "tensor_dap.summary",
    "histogram": "tensor_dap.summary.histogram",
    # the objects around tensors (also what the Variables panel's Watch expressions call)
    "describe_module": "tensor_dap.summary.objects",
    "describe_optimizer": "tensor_dap.summary.objects",
    "describe_scheduler": "tensor_dap.summary.objects",
    "describe_loader": "tensor_dap.summary.objects",
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
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tensor_dap' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))
