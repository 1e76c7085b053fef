"""Findings read from what the model holds now, with no re-run of the step: the first module holding a non-finite
parameter as a step begins (and who can have written it), or a non-finite gradient's module (where a re-run cannot go
or found nothing: the module holding the value, not where it was born)."""

from __future__ import annotations

from typing import Any

import torch

from .localize import Finding, nonfinite, param_rows
from .param_writer import update_diagnosis, update_ruled_out


def nonfinite_parameters(model: torch.nn.Module, *, first_step: bool = False, optimizer: Any = None,
                         checked: bool = False) -> Finding | None:
    """The first module (registration order) holding a non-finite parameter, if any. ``first_step``: no update
    was watched yet, so none of ours wrote it (a checkpoint loaded with NaN/Inf, or training before the watch).
    ``optimizer``: the one that made the last update, asked whether it can have written it (``param_writer``);
    ``checked``: the gradients of that update were checked finite before it (a watch reading every step)."""
    for path, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if nonfinite(p):
                if first_step:
                    writer, why = "before watch", ("it was so when the watch began (already at the first watched "
                                                   "step: a checkpoint loaded with NaN/Inf, or updates before the "
                                                   "watch)")
                elif optimizer is not None and (outside := update_ruled_out(optimizer, p)) is not None:
                    writer, why = "outside", outside
                else:
                    writer, why = "update", "the previous update wrote it"
                return Finding("optimizer", path, type(mod).__name__,
                               f"parameter {pname!r} is non-finite before the step: {why}",
                               param_rows(mod), {"module": mod, "parameter": p}, writer=writer,
                               diagnosis=update_diagnosis(optimizer, p, checked)
                               if writer == "update" and optimizer else None)
    return None


def nonfinite_gradients(model: torch.nn.Module, *, rerun: bool = False, func: bool = False) -> Finding | None:
    """The module holding a non-finite .grad, last-registered first (backward order): without a re-run, or
    (``rerun``) after one that found nothing (the gradient came from another rank, or the step did not repeat);
    ``func``: the program set it from a torch.func transform (DP-SGD's per-sample gradients), with no backward()."""
    how = "the module holding it" if rerun else "found without a re-run: the module holding the gradient"
    more = "" if rerun else "; see 'the two modes' in docs/triggers.md"
    if func:
        how, more = "set by the program from a torch.func transform, with no backward(): the module holding it", \
            "; where the NaN was made is in the code that computes it"
    for path, mod in reversed(list(model.named_modules())):
        for pname, p in mod.named_parameters(recurse=False):
            if p.grad is not None and nonfinite(p.grad):
                return Finding("backward", path, type(mod).__name__,
                               f"gradient of {pname!r} is non-finite ({how}, not where it was born{more})",
                               param_rows(mod), {"module": mod, "parameter": p}, writer="program" if func else "update")
    return None
