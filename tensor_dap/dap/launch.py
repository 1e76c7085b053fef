"""VS Code launch configurations: the templates, and their merge into a user's launch.json.

``launch_templates.json`` beside this file is the single source (the VS Code extension ships
the same file). The merge adds each template whose name the file lacks, plus the ``inputs``
entries an added template references as ``${input:ID}``, and changes nothing else: comments,
formatting, trailing commas and the user's own configurations stay as they were, because the
new text is inserted at offsets found by ``jsonc``. Same behaviour as the extension's merge.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from . import jsonc

TEMPLATES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_templates.json")
ATTACH = "Attach to GPU box (SSH tunnel)"
REMOTE_PLACEHOLDER = "/ABSOLUTE/PATH/OF/THE/PROJECT/ON/THE/GPU/BOX"
_INPUT = re.compile(r"\$\{input:([^}]+)\}")


class LaunchJsonError(ValueError):
    """The existing launch.json cannot be merged into (it does not parse, or is not an object)."""


@dataclass
class Templates:
    configurations: list[dict[str, Any]]
    inputs: list[dict[str, Any]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [c["name"] for c in self.configurations]


def templates(*, port: Optional[int] = None, remote_root: Optional[str] = None) -> Templates:
    """The templates, with the GPU-box attach configuration's port and remote folder filled in when given."""
    with open(TEMPLATES_FILE, encoding="utf-8") as f:
        data = json.load(f)
    configs = copy.deepcopy(data["configurations"])
    for config in configs:
        if config["name"] != ATTACH:
            continue
        if port is not None:
            config["connect"]["port"] = port
        if remote_root is not None:
            for mapping in config.get("pathMappings", []):
                mapping["remoteRoot"] = remote_root
    return Templates(configs, list(data.get("inputs", [])))


@dataclass
class MergeResult:
    text: str
    added: list[str]
    kept: list[str]  # template names launch.json already had: left as the user wrote them

    original: Optional[str] = None

    @property
    def changed(self) -> bool:
        return self.text != (self.original or "")


def input_ids(config: Any) -> list[str]:
    return list(dict.fromkeys(_INPUT.findall(json.dumps(config))))


def merge(existing: Optional[str], tpl: Templates, names: Optional[list[str]] = None) -> MergeResult:
    """``existing`` launch.json text (None or blank: a new file) with the chosen templates appended."""
    chosen = [c for c in tpl.configurations if names is None or c["name"] in names]
    text = existing if existing and existing.strip() else ""
    root = _parse(text) if text else None
    configs = root.get("configurations") if root else None
    if configs is not None and configs.kind != "array":
        raise LaunchJsonError("launch.json: 'configurations' is not a list; nothing was changed")
    have = {c.get("name") for c in (configs.value if configs else []) if isinstance(c, dict)}
    to_add = [c for c in chosen if c["name"] not in have]
    kept = [c["name"] for c in chosen if c["name"] in have]
    inputs_node = root.get("inputs") if root else None
    have_inputs = {i.get("id") for i in (inputs_node.value if inputs_node and inputs_node.kind == "array" else [])
                   if isinstance(i, dict)}
    wanted = dict.fromkeys(i for c in to_add for i in input_ids(c) if i not in have_inputs)
    inputs = [i for i in tpl.inputs if i["id"] in wanted]
    if root is None:
        fresh: dict[str, Any] = {"version": "0.2.0", "configurations": to_add}
        if inputs:
            fresh["inputs"] = inputs
        return MergeResult(_dumps(fresh, "    ") + "\n", [c["name"] for c in to_add], kept, existing)
    unit, eol = _formatting(text)
    edits: list[tuple[int, str]] = []
    props: list[str] = []
    if root.get("version") is None:
        props.append('"version": "0.2.0"')
    if configs is not None:
        edits += _append(text, configs, [_dumps(c, unit) for c in to_add], unit, eol)
    elif to_add:
        props.append(f'"configurations": {_dumps(to_add, unit)}')
    if inputs:
        if inputs_node is not None and inputs_node.kind == "array":
            edits += _append(text, inputs_node, [_dumps(i, unit) for i in inputs], unit, eol)
        else:
            props.append(f'"inputs": {_dumps(inputs, unit)}')
    if props:
        edits += _append(text, root, props, unit, eol)
    out = text
    # Back to front so earlier offsets stay valid; at one offset the later insertion goes first,
    # so the texts end up in the order they were listed.
    for at, _, insert in sorted(((at, i, t) for i, (at, t) in enumerate(edits)), key=lambda e: (-e[0], -e[1])):
        out = out[:at] + insert + out[at:]
    return MergeResult(out, [c["name"] for c in to_add], kept, existing)


def _parse(text: str) -> jsonc.Node:
    try:
        root = jsonc.parse(text)
    except jsonc.JsoncError as exc:
        raise LaunchJsonError(f"launch.json does not parse ({exc}); fix it first, nothing was changed") from None
    if root.kind != "object":
        raise LaunchJsonError("launch.json is not a JSON object; nothing was changed")
    return root


def _dumps(value: Any, unit: str) -> str:
    return json.dumps(value, indent=unit, ensure_ascii=False)


def _append(text: str, container: jsonc.Node, items: list[str], unit: str, eol: str) -> list[tuple[int, str]]:
    """Insertions appending ``items`` (values, or ``"key": value``) to an array or object, touching nothing there:
    a comma after the last item if it had none, new items on their own lines at its indentation, after a
    comment that ends its line; a trailing-comma style is kept."""
    if not items:
        return []
    closing = container.end - 1  # the ] or }
    outer = _line_indent(text, container.start)
    if not container.children:
        inner = outer + unit
        return [(closing, eol + ("," + eol).join(_indent(i, inner, eol) for i in items) + eol + outer)]
    last = container.children[-1]
    end = last.end
    inner = _line_indent(text, last.key_start if last.key_start is not None else last.start)
    pos = _skip_blanks(text, end)
    has_comma = text.startswith(",", pos)
    if has_comma:
        pos = _skip_blanks(text, pos + 1)
    if text.startswith("//", pos):
        nl = text.find("\n", pos)
        pos = len(text) if nl < 0 else (nl - 1 if text[nl - 1] == "\r" else nl)
    at_line_end = pos >= len(text) or text[pos] in "\r\n"
    body = ("," + eol).join(_indent(i, inner, eol) for i in items)
    insert = eol + body + ("," if has_comma else "") + ("" if at_line_end else eol + outer)
    if has_comma:
        return [(pos, insert)]
    return [(end, ","), (pos, insert)] if at_line_end else [(end, "," + insert)]


def _skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _indent(item: str, prefix: str, eol: str) -> str:
    return eol.join(prefix + line for line in item.split("\n"))


def _line_indent(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    return re.match(r"[ \t]*", text[start:offset]).group(0)  # type: ignore[union-attr]


def _formatting(text: str) -> tuple[str, str]:
    m = re.search(r"^([ \t]+)\S", text, re.M)
    unit = m.group(1) if m else "    "
    return ("\t" if "\t" in unit else unit), ("\r\n" if "\r\n" in text else "\n")
