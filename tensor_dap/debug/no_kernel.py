"""What "Could not run 'aten::op' with arguments from the 'Backend' backend" means, in the crash report.

torch says it for an op called on a tensor of a layout or device it has no kernel for (a sparse tensor, a meta
tensor, MPS), followed by its whole dispatch table: 90 lines of "registered at" that the traceback folds
(``crash.collapsed_traceback``). pytorch/examples' GCN without its self-loops keeps its adjacency matrix sparse and
int64, and ``1 / degree_mat`` fails so. The failing line's tensors of that kind are named, with the way out.
"""

from __future__ import annotations

import re
from typing import Any

from .frames import failing_frame
from .line_values import failing_line, named_values

NO_KERNEL = re.compile(r"Could not run '(?:aten::)?([\w.]+)' with arguments from the '(\w+)' backend")
DISPATCH_ROW = re.compile(r"^\w+: (?:fallthrough )?registered at \S+ \[[^\]\n]*\]\n", re.MULTILINE)
MAX_NAMED = 3


def advice(exc: BaseException, tb: Any) -> str:
    """The op, the kind of tensor it has no kernel for, the line's tensors of that kind and what to do; '' for any
    other error."""
    try:
        found = NO_KERNEL.search(str(exc))
        if found is None:
            return ""
        op, backend = found.groups()
        kind, holds, fix = _kind(backend)
        frame, lineno = failing_frame(tb)
        named = [name for name, value in named_values(frame, failing_line(frame, lineno)) if _holds(holds, value)]
    except Exception:  # noqa: BLE001 - advice must never replace the program's own error
        return ""
    which = ""
    if named:
        shown = ", ".join(f"`{n}`" for n in named[:MAX_NAMED])
        which = f", and {shown} {'is' if len(named) == 1 else 'are'} {kind}"
    fix = fix.format(first=named[0] if named else "x")
    backend = f" ({backend})" if kind != backend else ""
    return f"tensor_dap: {op} has no kernel for {kind} tensors{backend}{which}: {fix}"


def _kind(backend: str) -> tuple[str, str, str]:
    """(what the backend's tensors are, the test for one, what to do) for a dispatch backend's name."""
    if backend.startswith("Sparse"):
        return ("sparse", "sparse", "torch implements only some ops for sparse layouts; make it dense first "
                                    "(`{first}.to_dense()`), or keep it dense until an op that needs it sparse")
    if backend == "Meta":
        return ("meta", "meta", "a meta tensor has a shape and no data (a model built on the meta device and never "
                                "materialized? `model.to_empty(device=...)` then load its weights)")
    if backend == "MPS":
        return ("MPS", "mps", "this op is not implemented on Apple's GPU yet; PYTORCH_ENABLE_MPS_FALLBACK=1 runs it "
                              "on the CPU, or move `{first}` to the CPU for it")
    if backend.startswith("Quantized"):
        return ("quantized", "quantized", "quantized tensors support few ops: `{first}.dequantize()` first")
    if backend.startswith("NestedTensor"):
        return ("nested", "nested", "nested tensors support few ops: `{first}.to_padded_tensor(0.0)` first, or a "
                                    "jagged layout (torch.nested.nested_tensor(..., layout=torch.jagged))")
    return (backend, "", "this build of torch has none for this device (an op of another device's library, such "
                         "as cuDNN's, called on the CPU?); run it where its kernel is, or use the op's portable form")


def _holds(kind: str, value: Any) -> bool:
    """Whether ``value`` is a tensor of ``kind`` (``_kind``'s test); '' matches none."""
    import torch

    from ..summary.held import is_sparse

    if not kind or not isinstance(value, torch.Tensor):
        return False
    return {"sparse": is_sparse, "meta": lambda t: t.is_meta, "mps": lambda t: t.device.type == "mps",
            "quantized": lambda t: t.is_quantized, "nested": lambda t: t.is_nested}[kind](value)
