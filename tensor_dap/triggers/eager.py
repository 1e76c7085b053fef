"""Global module hooks that ``torch.compile`` must run, not trace.

A hook registered for every module (``register_module_forward_pre_hook``) also fires for the
modules inside a compiled model, while dynamo traces them; tracing tensor_dap's bookkeeping there
(a ``WeakSet`` of the modules seen, for instance) can fail inside dynamo and stop the user's
program. ``eager`` marks such a hook so that dynamo breaks its graph around the call and runs the
hook as plain Python. Only short-lived hooks take it (the ones that look for the model until a
watch is attached): the mark costs a few microseconds a call.
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable[..., object])


def eager(hook: F) -> F:
    """``hook``, never traced by ``torch.compile`` (as it is where this torch has no compiler)."""
    try:
        import torch.compiler

        disable = torch.compiler.disable
    except (ImportError, AttributeError):
        return hook
    return disable(hook)  # type: ignore[return-value]
