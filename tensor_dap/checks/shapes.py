"""``check_shapes``: one probing forward pass, every submodule's shapes, dtypes and devices, like torchinfo.

The pass is ``probe.shapes.shape_flow`` (no_grad, eval mode; modes, buffers and RNG put back),
so the model is the same object in the same state afterwards, gradients included. On top of
the table it flags what usually means a bug: the pass failed (and in which module), the batch
dimension changed size, float64 crept in, submodules that were never called.
"""

from __future__ import annotations

from typing import Any

from ..format import fmt_shape, plural
from ..kinds import is_module
from ..probe.shapes import LayerRow, ShapeFlow, ShapesUsageError, call_args, describe_shapes, shape_flow
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, names, never_raises, result

COLUMNS = ("module", "type", "input", "output", "dtype", "device", "params")


def _leaves(rows: list[LayerRow]) -> set[str]:
    """Names of the modules that ran without any submodule of theirs running: where computation happens."""
    parents = {r.name.rpartition(".")[0] for r in rows if r.name}
    return {r.name for r in rows if r.name not in parents}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _batch_change(rows: list[LayerRow]) -> tuple[LayerRow | None, str, int, int] | None:
    """Where a batch of samples is reshaped into another leading size: (module, 'in'/'before'/'out', batch
    size, new size), or None.

    A reshape keeps the element count, so a tensor counts only if its element count is a multiple of the
    batch size: a fresh tensor built in forward (position ids, a causal mask) is left alone. The change is
    reported when the model's output no longer leads with the batch, or when a module receives a tensor with
    as many elements as a batch-led one seen before it and a leading size that splits samples apart.
    """
    top = rows[0]
    if not top.input_shape or len(top.input_shape) < 2 or not top.input_shape[0]:
        return None  # an unbatched (1-d) or empty input: no batch dimension to follow
    batch = top.input_shape[0]
    out = top.output_shape
    changed = bool(out) and out[0] != batch
    batched = {_numel(top.input_shape)}  # element counts of tensors that still lead with the batch
    leaves = _leaves(rows)
    for r in rows[1:]:
        if r.name not in leaves or not r.input_shape:
            continue  # a container: its first child shows the same input
        lead, n = r.input_shape[0], _numel(r.input_shape)
        if lead != batch and n % batch == 0 and len(r.input_shape) >= 2 and (
                changed or (n in batched and lead % batch)):
            return r, "before", batch, lead
        if lead == batch:
            batched.add(n)
            if r.output_shape and r.output_shape[0] != batch and _numel(r.output_shape) == n:
                return r, "in", batch, r.output_shape[0]
        if r.output_shape and r.output_shape[0] == batch:
            batched.add(_numel(r.output_shape))
    return (None, "out", batch, out[0]) if changed else None


def _not_called(model: Any, ran: set[str]) -> list[str]:
    """Submodules that did not run, outermost only, leaving out containers whose children ran and the
    children of a module that ran without calling any of them (nn.MultiheadAttention reads its out_proj's
    weights directly: a parent computing with its children's parameters)."""
    holders = {""} if any(ran - {""}) else set()  # modules with a submodule that ran (one pass: bounded)
    for r in ran:
        parts = r.split(".")
        holders.update(".".join(parts[:i]) for i in range(1, len(parts)))
    out: list[str] = []
    reported: set[str] = set()
    for name, _ in model.named_modules():
        if not name or name in ran or name in holders:
            continue  # ran, or a ModuleList/ModuleDict never called itself whose members were
        parent = name.rpartition(".")[0]
        if parent in ran and parent not in holders:
            continue
        parts = name.split(".")
        if any(".".join(parts[:i]) in reported for i in range(1, len(parts))):
            continue  # inside a module already reported
        reported.add(name)
        out.append(name)
    return out


def _failure(flow: ShapeFlow) -> Finding:
    """Where the pass failed: the innermost module that raised, the line of user code, and the mismatch."""
    rows = list(flow.rows)
    culprit = next((r for r in rows if r.error), None)
    leaves = _leaves(rows)
    done = [r for r in rows if r.output and r.name in leaves and r.name]
    if culprit is not None and (culprit.name == "" or culprit.name not in leaves):
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


def _batch_finding(rows: list[LayerRow]) -> list[Finding]:
    change = _batch_change(rows)
    if change is None:
        return []
    row, where, before, after = change
    # folding the batch into more rows (attention heads, windows, tokens) is usually meant; any other
    # new leading size mixes samples together, the classic wrong view(-1, n)
    level = INFO if after % before == 0 else WARNING
    if row is None:
        subject, place = "(model)", f"between the input and the output ({rows[0].output})"
    else:
        shape = row.input_shape if where == "before" else row.output_shape
        subject = row.name
        place = (f"in {row.kind}" if where == "in" else f"in the forward code just before {row.kind} "
                 f"{row.name}") + f" ({fmt_shape(shape)})"
    return [Finding(level, subject, f"the leading (batch) dimension changes from {before} to {after} {place}",
                    "a view/reshape with a hard-coded size? x.flatten(1) or x.view(x.size(0), -1) keeps samples apart")]


def _float64_finding(rows: list[LayerRow]) -> list[Finding]:
    if rows[0].input_dtype == "f64":
        return []  # a float64 model by choice
    upcasts = [r for r in rows if r.dtype == "f64" and r.input_dtype not in ("f64", "")]
    leaves = _leaves(rows)
    f64 = next((r for r in upcasts if r.name in leaves), upcasts[-1] if upcasts else None)  # innermost first
    if f64 is None:
        return []
    return [Finding(WARNING, f64.name or "(model)", f"float64 appears here ({f64.kind} turns {f64.input_dtype} "
                    "into f64) and flows on", "float64 is 2–64× slower, on GPUs most: look for torch.from_numpy / "
                    "torch.tensor on float64 data, or a double constant")]


def _idle_findings(model: Any, rows: list[LayerRow]) -> list[Finding]:
    idle = _not_called(model, {r.name for r in rows})
    weighted = [n for n in idle if any(True for _ in model.get_submodule(n).parameters())]
    found = []
    if weighted:
        found.append(Finding(WARNING, names(weighted), f"{plural(len(weighted), 'submodule')} with parameters "
                             "never called in this (eval-mode) forward pass", "a layer defined in __init__ but not "
                             "used in forward? (train-only branches show here too) Its parameters get no gradient"))
    if len(idle) > len(weighted):  # a Dropout or activation on a path not taken changes nothing
        found.append(Finding(INFO, names([n for n in idle if n not in weighted]), "never called in this "
                             "(eval-mode) forward pass (no parameters)"))
    return found


def _findings(model: Any, flow: ShapeFlow) -> list[Finding]:
    rows = list(flow.rows)
    if flow.error:  # a pass that stopped half way says nothing about unused modules
        return [_failure(flow)] + _batch_finding(rows) + _float64_finding(rows)
    return _batch_finding(rows) + _float64_finding(rows) + _idle_findings(model, rows)


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
