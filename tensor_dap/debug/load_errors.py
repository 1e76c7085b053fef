"""What ``load_state_dict``'s "Error(s) in loading state_dict" means, in the crash report.

torch lists the missing and unexpected keys (hundreds, for a real model) and says nothing of why. Its own frame
still holds the model and the state dict it was handed, so the checkpoint check (``checks.state_dict``) runs on
them: a wrapper's prefix (``module.`` from DataParallel/DDP, ``_orig_mod.`` from torch.compile), renamed layers,
transposed or resized weights, each with its fix. Names and shapes are read; nothing is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checks.result import PROBLEM, WARNING
from ..checks.state_dict import compare_state_dict

LOADING = "Error(s) in loading state_dict for"
MAX_FINDINGS = 3  # of the check's, after its summary: the report stays one screen


def advice(exc: BaseException, tb: Any) -> str:
    """The check's summary and its first findings for a failed ``load_state_dict``; '' for any other error."""
    try:
        if LOADING not in str(exc):
            return ""
        found = _loading_frame(tb)
        if found is None:
            return ""
        result = compare_state_dict(*found)
    except Exception:  # noqa: BLE001 - advice must never replace the program's own error
        return ""
    findings = [f for f in result.findings if f.level in (PROBLEM, WARNING)][:MAX_FINDINGS]
    if not findings:
        return ""
    lines = [f"tensor_dap: {result.summary}"]
    for f in findings:
        lines += [f"  {f.message}"] + ([f"    fix: {f.advice}"] if f.advice else [])
    return "\n".join(lines)


def _loading_frame(tb: Any) -> tuple[Any, Mapping] | None:
    """(the module, the state dict) of the innermost ``load_state_dict`` call the traceback went through."""
    import torch

    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "load_state_dict":
            module, state = frame.f_locals.get("self"), frame.f_locals.get("state_dict")
            if isinstance(module, torch.nn.Module) and isinstance(state, Mapping):
                found = (module, state)
        tb = tb.tb_next
    return found
