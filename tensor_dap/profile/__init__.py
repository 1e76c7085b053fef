"""Profiling and training monitoring: where the time and memory go, and whether the model learns.

``session`` runs a program under one profiler (``cpu``, ``line``, ``trace`` for torch.profiler,
``memory``) and writes the files the VS Code extension opens (``output`` names them);
``timer`` and ``step_profiler`` time code from inside a training loop; ``monitor`` writes
TensorBoard scalars and histograms and ``diagnose`` reads the curves; ``logs`` sets up logging.

The package itself is callable: ``@tensor_dap.profile`` marks a function for ``--mode line``
(a no-op outside a line profile), so the decorator and the subpackage share one name.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    """``tensor_dap.profile`` is both this subpackage and the ``@profile`` decorator.

    Importing any submodule binds the name ``profile`` on ``tensor_dap`` to this module, so the
    decorator cannot be a separate object under the same name; the module itself decorates.
    """

    def __call__(self, func: Any) -> Any:
        from .marks import mark_for_line_profile

        return mark_for_line_profile(func)


sys.modules[__name__].__class__ = _CallablePackage
profile = sys.modules[__name__]  # what ``tensor_dap.profile`` resolves to through the lazy export table
