"""``check_devices``: where a model's parameters, buffers and inputs live, and who is somewhere else.

Only metadata is read (``.device``, ``.dtype``, sizes), so a model on the ``meta`` device or a
mix of ``meta`` and ``cpu`` (how the demo simulates a GPU it does not have) checks the same way
as a real one, and nothing is copied or synchronized.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..format import dtype_name, fmt_bytes, plural
from ..kinds import is_module, torch_attr
from ..nested import walk
from ..summary.held import held_bytes
from .result import PROBLEM, WARNING, CheckResult, Finding, names, never_raises, result
from .unregistered import unregistered_findings

COLUMNS = ("device", "what", "tensors", "bytes", "names")


def _owner(name: str) -> str:
    return name.rpartition(".")[0] or "(model)"


def _model_tensors(model: Any) -> list[tuple[str, str, Any]]:
    """(kind, name, tensor) for every parameter and buffer, shared ones once."""
    out = [("parameter", n, p) for n, p in model.named_parameters()]
    out += [("buffer", n, b) for n, b in model.named_buffers() if b is not None]
    return out


def _inputs(tensors: tuple[Any, ...], named: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    """(name, tensor) for every tensor inside the inputs, nested batches included (bounded walk), and the
    names of the inputs that hold no tensor at all."""
    found: list[tuple[str, Any]] = []
    empty: list[str] = []
    for label, value in [(f"input[{i}]", v) for i, v in enumerate(tensors)] + list(named.items()):
        inside = list(walk(value, label, limit=10_000))
        found += inside
        if not inside:
            empty.append(label)
    return found, empty


def _home(model_tensors: list[tuple[str, str, Any]]) -> str | None:
    """The device holding most of the model's bytes: where the inputs are expected."""
    weight: Counter[str] = Counter()
    for _, _, t in model_tensors:
        weight[str(t.device)] += held_bytes(t) or 1
    return weight.most_common(1)[0][0] if weight else None


def _kind(device: str) -> str:
    return device.split(":")[0]


def _model_findings(model_tensors: list[tuple[str, str, Any]], home: str) -> list[Finding]:
    """Each module whose tensors are not on the home device, named once with what it holds there."""
    found: list[Finding] = []
    away: dict[tuple[str, str], list[str]] = {}
    for _, name, t in model_tensors:
        device = str(t.device)
        if device != home:
            away.setdefault((_owner(name), device), []).append(name.rpartition(".")[2])
    for (owner, device), held in away.items():
        # cuda:0 and cuda:1 may be deliberate model parallelism; cpu next to cuda (or meta) is a forgotten .to()
        level = WARNING if _kind(device) == _kind(home) else PROBLEM
        found.append(Finding(level, owner, f"{names(held)} on {device}, the rest of the model on {home}",
                             f"model.to({home!r}) after building every submodule (a tensor kept in a plain "
                             "attribute or list is not moved: register it with register_buffer)"))
    return found


def _input_findings(inputs: list[tuple[str, Any]], home: str, float_dtype: str | None,
                    recurrent: bool = False) -> list[Finding]:
    """Inputs away from the model. Where torch itself wants them on the CPU, they are not: a ``PackedSequence``'s
    ``batch_sizes`` always; sequence lengths for ``pack_padded_sequence`` in a model with an RNN (a warning,
    since labels look the same and do need moving)."""
    found: list[Finding] = []
    for name, t in inputs:
        device = str(t.device)
        if device != home:
            if device == "cpu" and name.endswith(".batch_sizes"):
                continue  # a PackedSequence's: torch keeps them on the CPU whatever the device of its data
            if device == "cpu" and recurrent and t.dim() == 1 and not t.is_floating_point():
                found.append(Finding(WARNING, name, f"1-D integer input on cpu, model on {home}",
                                     "right for sequence lengths given to pack_padded_sequence (torch wants "
                                     "them on the CPU); labels or indices must move: "
                                     f"y = y.to({home!r}, non_blocking=True)"))
            else:
                found.append(Finding(PROBLEM, name, f"input on {device}, model on {home}",
                                     f"move the batch where the model is: x = x.to({home!r}, non_blocking=True)"))
        elif float_dtype and t.is_floating_point() and dtype_name(str(t.dtype)) != float_dtype:
            found.append(Finding(WARNING, name, f"input is {dtype_name(str(t.dtype))}, model parameters "
                                 f"{float_dtype}", "matmuls with mixed dtypes raise outside autocast: "
                                 "x.to(dtype) or run the step under torch.autocast"))
    return found


def _float_dtype(model_tensors: list[tuple[str, str, Any]]) -> str | None:
    dtypes = Counter(dtype_name(str(t.dtype)) for kind, _, t in model_tensors
                     if kind == "parameter" and t.is_floating_point())
    return dtypes.most_common(1)[0][0] if len(dtypes) == 1 else None


@never_raises("devices")
def check_devices(model: Any, *tensors: Any, **named: Any) -> CheckResult:
    """Parameters and buffers spread over several devices, and inputs on another device than the model.

    ``tensors`` and ``named`` are the inputs the model will see: tensors or nested batches
    (dicts, lists, tuples of tensors), e.g. ``check_devices(model, x, labels=y)``.
    """
    if not is_module(model):
        return result("devices", "not a model", [Finding(PROBLEM, type(model).__name__, "expected an nn.Module")])
    model_tensors = _model_tensors(model)
    inputs, stray = _inputs(tensors, named)
    home = _home(model_tensors) or (str(inputs[0][1].device) if inputs else None)
    groups: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for kind, name, t in model_tensors:
        groups.setdefault((str(t.device), kind), []).append((name, t))
    for name, t in inputs:
        groups.setdefault((str(t.device), "input"), []).append((name, t))
    rows = [(device, what, len(items), sum(held_bytes(t) for _, t in items), names([n for n, _ in items], 3))
            for (device, what), items in sorted(groups.items(), key=lambda kv: (kv[0][0] != home, kv[0]))]
    findings: list[Finding] = []
    if home is not None:
        findings += _model_findings(model_tensors, home) + unregistered_findings(model, home)
        rnn = torch_attr("torch.nn.RNNBase")
        recurrent = isinstance(rnn, type) and any(isinstance(m, rnn) for m in model.modules())
        findings += _input_findings(inputs, home, _float_dtype(model_tensors), recurrent)
    if stray:
        findings.append(Finding(WARNING, names(stray), "holds no tensor: nothing to check"))
    devices = sorted({d for d, _ in groups})
    size = fmt_bytes(sum(held_bytes(t) for _, _, t in model_tensors))
    summary = (f"{type(model).__name__}: {plural(len(model_tensors), 'tensor')} ({size}) on "
               f"{' + '.join(devices) or 'no device'}, {plural(len(inputs), 'input')}"
               + (f"; home {home}" if home else ""))
    return result("devices", summary, findings, columns=COLUMNS, rows=rows,
                  facts={"home": home, "devices": devices, "inputs": len(inputs)})
