"""tensor_dap's hooks and wrappers where ``torch.compile`` runs: run by dynamo, not traced.

A hook registered for every module (``register_module_forward_pre_hook``) also fires for the
modules inside a compiled model, while dynamo traces them; tracing tensor_dap's bookkeeping there
(a ``WeakSet`` of the modules seen, for instance) can fail inside dynamo and stop the user's
program. ``eager`` marks such a hook so that dynamo breaks its graph around the call and runs the
hook as plain Python (``global_forward_pre_hook``). Only short-lived hooks take it (the ones that
look for the model until a watch is attached, the profiler's prelude check): the mark costs a few
microseconds a call. The unchanged loop's capture, a function around the model's own call, takes
a lighter mark that leaves the model it calls compiled (``eager_around``).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., object])

try:  # truthy while dynamo's frame evaluation is on in this thread: a Python function called now would be compiled
    # (plain Python running inside a ``torch.compile``'d call, in a frame ``eager`` skips). A C function (~30 ns):
    # called from such a frame, unlike a Python helper, it is not itself handed to dynamo.
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as compiling
except ImportError:  # a torch without dynamo
    def compiling() -> None:
        return None


def compiler_loaded() -> bool:
    """Whether ``torch.compile`` was used in this process (dynamo is loaded): marking a function for it then
    costs nothing more (the mark imports dynamo, ~1 s)."""
    return "torch._dynamo" in sys.modules


def eager(hook: F) -> F:
    """``hook``, never traced by ``torch.compile`` (as it is where this torch has no compiler)."""
    try:
        import torch.compiler

        disable = torch.compiler.disable
    except (ImportError, AttributeError):
        return hook
    return disable(hook)  # type: ignore[return-value]


def eager_around(call: F, inner: Callable[..., Any]) -> F:
    """``call``, a function of ours around ``inner`` (a model's own call), for a model that ``torch.compile``
    traces: ``call``'s own code runs as plain Python, what it calls (``inner``) is compiled as before. A call
    while ``torch.export`` traces (which refuses that mark) goes to ``inner`` alone: nothing to capture there.
    Costs ~0.3 µs a call."""
    try:
        import torch.compiler

        marked = torch.compiler.disable(call, recursive=False)
        exporting = torch.compiler.is_exporting
    except (ImportError, AttributeError, TypeError):
        return call

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        return (inner if exporting() else marked)(*args, **kwargs)

    return dispatch  # type: ignore[return-value]


def global_forward_pre_hook(hook: Callable[..., Any]) -> Any:
    """``hook`` before every module's forward (the handle to remove it), run as plain Python inside compiled models
    (``eager``). torch warns at every call of a ``torch.compile``'d module while such a hook exists ("Using
    `torch.compile(module)` when there are global hooks on modules"): tensor_dap's hooks expect the extra call it
    warns of, and the user installed none, so once tensor_dap installs one that warning is silenced in the process."""
    warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks",
                            category=UserWarning)
    return torch.nn.modules.module.register_module_forward_pre_hook(eager(hook))


@contextlib.contextmanager
def run_eagerly() -> Iterator[None]:
    """Within, every ``torch.compile``'d model, part or function runs as plain PyTorch (``set_stance("force_eager")``),
    and TorchScript without its optimizing executor: a re-run watching each op then sees the ops of a compiled part
    (timm's ``--torchcompile`` compiles the model inside its task module), which compiled code hides in one node
    (``CompiledFunctionBackward``, ``DifferentiableGraphBackward``). Dynamo is left alone where it was never used, or
    where this torch has no stances."""
    stance: Any = None
    scripted = torch.jit.optimized_execution(False)  # TorchScript's plain interpreter: one autograd node an op
    scripted.__enter__()  # (its optimizing executor makes one DifferentiableGraphBackward of a scripted forward)
    if compiler_loaded():
        try:
            stance = torch.compiler.set_stance("force_eager")
            stance.__enter__()
        except Exception:  # noqa: BLE001 - no stances, or called inside a compiled region: as compiled
            stance = None
    try:
        yield
    finally:
        if stance is not None:
            with contextlib.suppress(Exception):
                stance.__exit__(None, None, None)
        scripted.__exit__(None, None, None)
