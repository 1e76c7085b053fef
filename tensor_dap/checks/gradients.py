"""``check_gradients``: after ``backward()``, is every trainable parameter getting a healthy gradient?

The norms are ``probe.grads.grad_report``'s (computed on each gradient's device, one transfer
per device), so this check costs what the pdb's ``grads`` command costs and changes nothing.
Parameters without a gradient are grouped by the submodule they belong to, so an unused or
detached branch reads as one finding, not fifty.
"""

from __future__ import annotations

from typing import Any

from ..format import fmt_num, plural
from ..kinds import is_module
from ..probe.grads import EXPLODING, VANISHING, GradRow, grad_report
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, names, never_raises, result
from .unregistered import unregistered_findings

COLUMNS = ("parameter", "shape", "grad_norm", "flag")

_ADVICE = {
    "NaN/Inf": ("problem", "the gradient is not finite", "find the first module that produced it: "
                "tensor_dap.watch(model, optimizer) stops at the NaN's origin"),
    "exploding": ("warning", "the gradient norm is above {exploding:g}", "clip with "
                  "torch.nn.utils.clip_grad_norm_, lower the learning rate, or check the loss scale"),
    "vanishing": ("warning", "the gradient norm is below {vanishing:g}", "a saturated activation, a tiny "
                  "initialization or a detach upstream? compare with the layers after it"),
    "zero": ("warning", "the gradient is exactly zero", "dead ReLUs, a masked-out branch, or an output "
             "multiplied by zero"),
    "error": ("warning", "the gradient could not be read", ""),
}


def _groups(rows: list[GradRow]) -> list[tuple[str, list[str]]]:
    """Parameters without a gradient, grouped by the outermost submodule whose every parameter lacks one."""
    total: dict[str, int] = {}
    lacking: dict[str, int] = {}
    for r in rows:
        parts = r.name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            total[prefix] = total.get(prefix, 0) + 1
            lacking[prefix] = lacking.get(prefix, 0) + (r.flag == "no grad")
    groups: dict[str, list[str]] = {}
    for r in rows:
        if r.flag == "no grad":
            parts = r.name.split(".")
            owner = next((p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
                          if lacking[p] == total[p]), r.name)
            groups.setdefault(owner, []).append(r.name)
    return list(groups.items())


@never_raises("gradients")
def check_gradients(model: Any, *, vanishing: float = VANISHING, exploding: float = EXPLODING) -> CheckResult:
    """Total and per-parameter gradient norms; flags NaN/Inf, zero, vanishing and exploding gradients, and
    trainable parameters that received none (unused or detached branches). Call it after ``backward()``."""
    if not is_module(model):
        return result("gradients", "not a model", [Finding(PROBLEM, type(model).__name__, "expected an nn.Module")])
    report = grad_report(model, type(model).__name__, vanishing=vanishing, exploding=exploding)
    rows = list(report.rows)
    findings: list[Finding] = []
    if rows and all(r.flag == "no grad" for r in rows):
        findings.append(Finding(PROBLEM, "(model)", f"none of the {plural(len(rows), 'trainable parameter')} "
                                "has a gradient", "call loss.backward() before check_gradients (and not after "
                                "optimizer.zero_grad())"))
    else:
        healthy = {r.name for r in rows if r.flag == ""}
        cancelled = []
        for r in rows:
            owner, _, leaf = r.name.rpartition(".")
            if r.flag in ("zero", "vanishing") and leaf == "bias" and f"{owner}.weight" in healthy:
                cancelled.append(r.name)
            elif r.flag in _ADVICE:
                level, message, advice = _ADVICE[r.flag]
                norm = "" if r.norm is None else f" ({fmt_num(r.norm)})"
                findings.append(Finding(level, r.name, message.format(vanishing=vanishing, exploding=exploding)
                                        + norm, advice))
        if cancelled:
            findings.append(Finding(INFO, names(cancelled), f"{plural(len(cancelled), 'bias', 'biases')} get (almost) "
                                    "no gradient while their weights do", "a normalization right after the layer "
                                    "(BatchNorm, InstanceNorm, LayerNorm) cancels a bias: bias=False saves it"))
        for owner, params in _groups(rows):
            whole = owner not in params
            subject = owner if whole else params[0]
            what = f"{plural(len(params), 'trainable parameter')} ({names([p[len(owner) + 1:] for p in params])})" \
                if whole else "this trainable parameter"
            findings.append(Finding(WARNING, subject, f"{what} received no gradient",
                                    "unused in forward, or its output was detached (.detach(), .item(), "
                                    "torch.no_grad, a numpy round-trip): freeze it with requires_grad_(False) "
                                    "if that is intended"))
    findings += unregistered_findings(model)
    if not rows:
        findings.append(Finding(WARNING, "(model)", "no trainable parameters",
                                f"{report.frozen} frozen" if report.frozen else ""))
    total = report.total_norm
    summary = (f"{type(model).__name__}: {plural(len(rows), 'trainable parameter')}, total grad norm "
               f"{fmt_num(total) if total is not None else '-'}"
               + (f", {report.frozen} frozen" if report.frozen else ""))
    flags = {f: report.count(f) for f in ("no grad", "zero", "vanishing", "exploding", "NaN/Inf") if report.count(f)}
    table = [(r.name, list(r.shape), r.norm, r.flag) for r in rows]
    return result("gradients", summary, findings, columns=COLUMNS, rows=table,
                  facts={"total_norm": total, "trainable": len(rows), "frozen": report.frozen, "flags": flags})
