"""Reading ``report.json`` back: every version, and nothing a crafted file could use against the reader.

A bundle may come from another machine, an older tensor_dap, or someone who edited it. Each
field is checked against its type before a ``Report`` is built (a wrong type is one clear
``ValueError`` naming the field), summaries are only accepted if they render, and nothing
nests deeper than a summary's gradient. Version 1 files (no ``version``) lack the newer
fields, which take their defaults.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..format import short_error
from ..summary import TensorSummary, from_json_number

NUMBER = "number"  # int or float, or the strings 'nan', 'inf', '-inf' (how JSON carries them)
MAX_ITEMS = 10_000  # notes, tensors, history entries: a real report has dozens


def _number(value: Any) -> bool:
    value = from_json_number(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(name: str, value: Any, kind: Any) -> Any:
    """``value`` when it has the type ``kind`` describes; else ValueError."""
    optional = isinstance(kind, tuple) and None in kind
    base = kind[0] if isinstance(kind, tuple) else kind
    if value is None and optional:
        return None
    if base == NUMBER:
        if not _number(value):
            raise ValueError(f"field {name!r}: expected a number, got {type(value).__name__}")
        return float(from_json_number(value))
    if base is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"field {name!r}: expected an integer, got {type(value).__name__}")
        return value
    if not isinstance(value, base):
        raise ValueError(f"field {name!r}: expected {base.__name__}, got {type(value).__name__}")
    return value


FIELDS: dict[str, Any] = {
    "kind": str, "headline": str, "step": (int, None), "phase": (str, None), "module": (str, None),
    "module_type": (str, None), "rank": (int, None), "loss": (NUMBER, None), "bundle": (str, None),
    "created": NUMBER, "op": (str, None), "forward_op": (str, None), "diagnosis": (str, None),
    "max_abs": (NUMBER, None), "max_abs_of": (str, None), "mode": (str, None), "program": (str, None),
    "clipping": (str, None), "clip_norm_seen": (NUMBER, None), "version": int,
}


def report_fields(data: Any, known: set[str]) -> dict[str, Any]:
    """Keyword arguments for ``Report`` from a JSON object; unknown keys (a newer version) are ignored."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    for required in ("kind", "headline"):
        if required not in data:
            raise ValueError(f"field {required!r} is missing")
    out: dict[str, Any] = {}
    for name, kind in FIELDS.items():
        if name in data and name in known:
            out[name] = _check(name, data[name], kind)
    out["version"] = out.get("version", 1)
    out["notes"] = [_check(f"notes[{i}]", v, str) for i, v in enumerate(_list("notes", data.get("notes", [])))]
    out["args"] = [_check(f"args[{i}]", v, str) for i, v in enumerate(_list("args", data.get("args", [])))]
    for name in ("loss_history", "lr"):
        out[name] = [_check(f"{name}[{i}]", v, NUMBER) for i, v in enumerate(_list(name, data.get(name, [])))]
    out["names"] = _names(data.get("names", {}))
    out["source"] = _source(data.get("source"), out)
    out["tensors"] = [_tensor_row(i, row) for i, row in enumerate(_list("tensors", data.get("tensors", [])))]
    return {k: v for k, v in out.items() if k in known}


def _names(value: Any) -> dict[str, str]:
    """``Report.names``: "model"/"optimizer" to the program's expression for it (``ddpm``, ``self.model``; the model
    a list of those, ``[qf1, qf2]``: ``parts``)."""
    if not isinstance(value, dict):
        raise ValueError(f"field 'names': expected an object, got {type(value).__name__}")
    for key, name in value.items():
        listed = key == "model" and isinstance(name, str) and name[:1] == "[" and name[-1:] == "]"
        names = name[1:-1].split(", ") if listed else [name]
        if key not in ("model", "optimizer") or not all(
                isinstance(one, str) and all(part.isidentifier() for part in one.split(".")) for one in names):
            raise ValueError(f"field 'names': {key!r} is not a model or optimizer named by a Python name")
    return dict(value)


def _list(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"field {name!r}: expected a list, got {type(value).__name__}")
    if len(value) > MAX_ITEMS:
        raise ValueError(f"field {name!r}: {len(value)} entries (more than {MAX_ITEMS})")
    return value


def _source(value: Any, fields: dict[str, Any]) -> dict[str, Any] | None:
    """``source``, with ``near`` (version 3) or what stood for it before (``_near_before_3``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"field 'source': expected an object, got {type(value).__name__}")
    source = {"file": _check("source.file", value.get("file"), str),
              "line": _check("source.line", value.get("line"), int),
              "text": _check("source.text", value.get("text", ""), str)}
    if fields["version"] < 3:
        near = _near_before_3(_check("source.after", value.get("after", False), bool), fields)
    else:
        near = _check("source.near", value.get("near"), (str, None))
    return {**source, "near": near} if near in NEAR else source


NEAR = ("before", "after")


def _near_before_3(after: bool, fields: dict[str, Any]) -> str | None:
    """Before version 3 a source was near a loss op, not its own line, where an unchanged loop ("loop") found a loss
    op or a batch's first use with no module: ``after`` said the model's call, else it was the backward() call."""
    if fields.get("mode") not in ("step", "closure") and (
            fields.get("phase") == "loss" or (fields.get("phase") == "input" and fields.get("module") is None)):
        return "after" if after else "before"
    return None


def _tensor_row(i: int, row: Any) -> tuple[str, str, TensorSummary]:
    where = f"tensors[{i}]"
    if not isinstance(row, list) or len(row) not in (3, 4):  # the 4th, the one-line text, is for other readers
        raise ValueError(f"field {where!r}: expected [section, name, summary, line]")
    section, name, data = row[:3]
    _check(f"{where}[0]", section, str)
    _check(f"{where}[1]", name, str)
    return section, name, summary(where, data)


def summary(where: str, data: Any, depth: int = 0) -> TensorSummary:
    """A ``TensorSummary`` from JSON, accepted only if it renders (its fields have usable types)."""
    from ..summary.line import one_line

    if not isinstance(data, dict):
        raise ValueError(f"field {where!r}: expected a summary object, got {type(data).__name__}")
    grad = data.get("grad")
    if grad is not None:
        if depth >= 1:
            raise ValueError(f"field {where!r}: a gradient's summary has no gradient of its own")
        data = {**data, "grad": summary(f"{where}.grad", grad, depth + 1)}
    try:
        fields = {k: v for k, v in data.items() if k != "grad"}
        s = TensorSummary.from_dict(fields)
        if grad is not None:
            s = _with_grad(s, data["grad"])
        one_line(s)
        _numbers(s)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
        raise ValueError(f"field {where!r}: not a tensor summary ({short_error(exc, limit=None)})") from None
    return s


def _with_grad(s: TensorSummary, grad: TensorSummary) -> TensorSummary:
    return dataclasses.replace(s, grad=grad)


def _numbers(s: TensorSummary) -> None:
    """The numbers a renderer formats must be numbers (a string there would only fail later, in a view)."""
    for name in ("min", "max", "mean", "std"):
        value = getattr(s, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, complex))):
            raise TypeError(f"{name} is a {type(value).__name__}")
