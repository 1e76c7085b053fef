"""``check_shapes``: one probing forward pass, every submodule's shapes, dtypes and devices, like torchinfo.

The pass is ``probe.shapes.shape_flow`` (no_grad, eval mode; modes, buffers and RNG put back),
so the model is the same object in the same state afterwards, gradients included. On top of
the table it flags what usually means a bug: the pass failed (and in which module), the batch
dimension changed size, float64 crept in, submodules that were never called.
"""

from __future__ import annotations

from typing import Any

from ..format import fmt_shape
from ..kinds import is_module
from ..probe.shapes import LayerRow, ShapeFlow, ShapesUsageError, call_args, describe_shapes, shape_flow
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, names, never_raises, plural, result

COLUMNS = ("module", "type", "input", "output", "dtype", "device", "params")


def _leaves(rows: list[LayerRow]) -> set[str]:
    """Names of the modules that ran without any submodule of theirs running: where computation happens."""
    parents = {r.name.rpartition(".")[0] for r in rows if r.name}
    return {r.name for r in rows if r.name not in parents}


def _batch_change(rows: list[LayerRow]) -> tuple[LayerRow, str, int, int] | None:
    """Where the leading (batch) size first stops being the model input's: inside a leaf module, or in the
    forward code just before one. Returns (module, 'in'/'before', batch size, new size)."""
    top = rows[0]
    if not top.input_shape:
        return None
    batch = top.input_shape[0]
    leaves = _leaves(rows)
    for r in rows[1:]:
        if r.name not in leaves:
            continue  # a container: its first child shows the same input
        if r.input_shape and r.input_shape[0] != batch:
            return r, "before", batch, r.input_shape[0]
        if r.input_shape and r.output_shape and r.output_shape[0] != batch:
            return r, "in", batch, r.output_shape[0]
    return None


def _not_called(model: Any, ran: set[str]) -> list[str]:
    """Submodules that did not run, outermost only, leaving out containers whose children ran."""
    out: list[str] = []
    for name, _ in model.named_modules():
        if not name or name in ran:
            continue
        if any(r.startswith(name + ".") for r in ran):
            continue  # a ModuleList/ModuleDict is never called itself; its members were
        if any(name.startswith(o + ".") for o in out):
            continue
        out.append(name)
    return out


def _failure(flow: ShapeFlow) -> Finding:
    """Where the pass failed: the innermost module that raised, the line of user code, and the mismatch."""
    rows = list(flow.rows)
    culprit = next((r for r in rows if r.error), None)
    done = [r for r in rows if r.output and r.name and not any(x.name.startswith(r.name + ".") for x in rows)]
    if culprit is not None and (culprit.name == "" or any(x.name.startswith(culprit.name + ".") for x in rows)):
        # failed in a container's own forward code (not inside a leaf layer): say what ran last
        subject = culprit.name or "(model)"
        place = f"in {culprit.kind}.forward" + (f", after {done[-1].name} → {done[-1].output}" if done else "")
    else:
        subject = culprit.name if culprit else "(model)"
        place = f"in {culprit.kind} (input {culprit.inputs})" if culprit else "before any module ran"
    message = f"the forward pass failed {place}: {flow.error}"
    if flow.where:
        message += f" at {flow.where}"
    hints = [fe.hint for fe in (flow.explanation.frames if flow.explanation else ()) if fe.hint]
    return Finding(PROBLEM, subject, message, hints[0] if hints else
                   "compare the shape this module expects with the one it received")


def _findings(model: Any, flow: ShapeFlow) -> list[Finding]:
    rows, error = list(flow.rows), flow.error
    found: list[Finding] = [_failure(flow)] if error else []
    change = _batch_change(rows)
    if change is not None:
        row, where, before, after = change
        # folding the batch into more rows (attention heads, windows, tokens) is usually meant; any other
        # new leading size mixes samples together, the classic wrong view(-1, n)
        level = INFO if after % before == 0 else WARNING
        shape = row.input_shape if where == "before" else row.output_shape
        place = f"in {row.kind}" if where == "in" else f"in the forward code just before {row.kind} {row.name}"
        found.append(Finding(
            level, row.name, f"the leading (batch) dimension changes from {before} to {after} {place} "
            f"({fmt_shape(shape)})", "a view/reshape with a hard-coded size? x.flatten(1) or "
            "x.view(x.size(0), -1) keeps samples apart"))
    upcasts = [r for r in rows if r.dtype == "f64" and r.input_dtype not in ("f64", "")]
    leaves = _leaves(rows)
    f64 = next((r for r in upcasts if r.name in leaves), upcasts[-1] if upcasts else None)  # innermost first
    if f64 is not None and rows[0].input_dtype != "f64":
        found.append(Finding(WARNING, f64.name or "(model)", f"float64 appears here ({f64.kind} turns "
                             f"{f64.input_dtype} into f64) and flows on", "float64 is 2–64× slower, on GPUs most: "
                             "look for torch.from_numpy / torch.tensor on float64 data, or a double constant"))
    if not error:
        idle = _not_called(model, {r.name for r in rows})
        if idle:
            found.append(Finding(INFO if len(idle) == 1 and _paramless(model, idle[0]) else WARNING, names(idle),
                                 f"{plural(len(idle), 'submodule')} never called in this (eval-mode) forward pass",
                                 "a layer defined in __init__ but not used in forward? (train-only branches also "
                                 "show here; their parameters will get no gradient)"))
    return found


def _paramless(model: Any, name: str) -> bool:
    return not any(True for _ in model.get_submodule(name).parameters())


@never_raises("shapes")
def check_shapes(model: Any, sample_input: Any) -> CheckResult:
    """Shapes, dtypes and devices through every submodule for one sample input; model state untouched.

    ``sample_input`` is passed like the ``shapes`` pdb command passes it: a tuple or list is spread
    over several arguments, a dict of str keys becomes keyword arguments, anything else is one argument.
    Works on the ``meta`` device too (shapes without data or compute).
    """
    if not is_module(model):
        return result("shapes", "not a model", [Finding(PROBLEM, type(model).__name__, "expected an nn.Module")])
    args, kwargs = call_args(sample_input)
    try:
        flow = shape_flow(model, args, kwargs)
    except ShapesUsageError as exc:
        return result("shapes", type(model).__name__, [Finding(PROBLEM, type(model).__name__, str(exc))])
    rows = list(flow.rows)
    out = rows[0].output if rows and not flow.error else "✗"
    summary = (f"{type(model).__name__}: {plural(len(rows), 'module')} ran, {plural(flow.total_params, 'parameter')}, "
               f"{describe_shapes(sample_input)} → {out}")
    table = [(r.name or "(model)", r.kind, r.inputs, ("✗ " + r.error) if r.error else r.output, r.dtype, r.device,
              r.params) for r in rows]
    facts = {"modules_ran": len(rows), "total_params": flow.total_params, "error": flow.error,
             "output": rows[0].output if rows else None}
    return result("shapes", summary, _findings(model, flow), columns=COLUMNS, rows=table, facts=facts)
