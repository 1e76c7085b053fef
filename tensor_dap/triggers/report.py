"""The trigger report: one model, three renderers (text, JSON, a rich panel).

Triggers and localization fill a ``Report`` with ``TensorSummary`` objects; the renderers
here only lay them out. ``emit`` is the one place a report leaves the process: the
``tensor_dap.triggers`` logger always, the console when a person may be watching.
``report.json`` is the JSON form, versioned (``version``); ``schema.from_dict`` reads any
version back and refuses a damaged file with one clear message. Every string a renderer shows
goes through ``format.printable`` (a report read from a file may hold escape sequences) and
into ``rich.text.Text`` (a module named ``blocks[/x]`` is not markup).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from ..format import fmt_num, printable, shown_path
from ..libraries import library_of
from ..state import rng_kept
from ..summary import TensorSummary, jsonable
from .birth import module_label

logger = logging.getLogger("tensor_dap.triggers")
# A library must not print through logging's last-resort handler: the console shows the
# report itself, and users who configure logging get the record as well.
logger.addHandler(logging.NullHandler())

PHASES = ("input", "forward", "backward", "optimizer", "loss")
# report.json schema: 1 had no version field and none of the fields below `created`; 2's source had "after" (True:
# the model's call a loss op came after) where 3 has "near"
VERSION = 3


@dataclass
class Report:
    """What fired, where, and the summaries of the tensors involved. Pure data."""

    kind: str  # "nonfinite", "above", "below", "spike", "scaler"
    headline: str
    step: int | None = None
    phase: str | None = None  # one of PHASES
    module: str | None = None  # full dotted path; "" is the root module
    module_type: str | None = None
    rank: int | None = None
    loss: float | None = None
    notes: list[str] = field(default_factory=list)
    tensors: list[tuple[str, str, TensorSummary]] = field(default_factory=list)  # (section, name, summary)
    bundle: str | None = None
    created: float = field(default_factory=time.time)
    # version 2
    op: str | None = None  # where the first non-finite value was born: "softmax", "SqrtBackward0"
    forward_op: str | None = None  # for a backward op: the forward op that created it ("sqrt")
    # the user's line: {"file": str, "line": int, "text": str}, and "near" where it is not the op's own (``Birth.near``)
    source: dict[str, Any] | None = None
    diagnosis: str | None = None  # the likely cause and the usual fix, one line
    loss_history: list[float] = field(default_factory=list)  # the last losses seen, oldest first
    lr: list[float] = field(default_factory=list)  # the learning rate of each param group
    max_abs: float | None = None  # the largest finite magnitude among the tensors involved
    max_abs_of: str | None = None  # which tensors those were: "the op's inputs", "parameters and gradients"
    mode: str | None = None  # how the bundle replays: "step" (with the step function), "closure" (with the optimizer's
    # closure) or "loop" (the model's forwards)
    program: str | None = None  # the script that was training (absolute path) and its arguments: what a replay reruns
    args: list[str] = field(default_factory=list)
    clipping: str | None = None  # how the program clipped its gradients ("norm 1"), kept for a replay's diagnosis
    clip_norm_seen: float | None = None  # the largest gradient norm its recent clips by norm measured
    names: dict[str, str] = field(default_factory=dict)  # the program's names of "model" and "optimizer", for the
    # replay line (``replay_names``), where they are not those
    version: int = VERSION

    @property
    def where(self) -> str:
        """'backward of encoder.layers.2.attn (Attention)'-style location, or ''."""
        parts = []
        if self.phase:
            parts.append(self.phase)
        if self.module is not None:
            name = module_label(self.module)
            typ = f" ({self.module_type})" if self.module_type else ""
            parts.append(f"{'of ' if self.phase else ''}{name}{typ}")
        elif self.phase in ("forward", "backward", "loss") and self.op:
            parts.append("outside any module")
        return " ".join(parts)

    @property
    def origin(self) -> str:
        """'SqrtBackward0 (the backward of sqrt) at model.py:41  y = torch.sqrt(x)', or ''; a line in an installed
        package's file says whose (``at _torch_specific.py:74 (einops)``)."""
        text = self.op or ""
        if self.op and self.forward_op:
            text += f" (the backward of {self.forward_op})"
        src = self.source or {}
        if src.get("file"):
            # the unchanged loop finds a loss op (or a batch's first use) in the loss's graph: its own line is not
            # known, so the line is the backward() call after it, or the model's call before it (``Birth.near``)
            if src.get("near"):
                text = text or "not known"  # (an op the loss's graph cannot tell: a sum that overflowed)
                at = f", in the loss computed {src['near']} "
            else:
                at = " at " if text else ""
            text += f"{at}{os.path.basename(str(src['file']))}:{src.get('line')}"
            owner = library_of(str(src["file"]))
            if owner not in (None, "python"):  # a package's file (einops, transformers): whose it is
                text += f" ({owner})"
            if src.get("text"):
                text += f"  {src['text']}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON data; each tensor row also carries its one-line summary, so readers never re-render it."""
        from ..summary.line import one_line

        data = jsonable(dataclasses.asdict(self))
        data["tensors"] = [[sec, name, summary, one_line(s)]
                           for (sec, name, summary), (_, _, s) in zip(data["tensors"], self.tensors)]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """A report from its JSON form, any version; ``ValueError`` names the first field that is wrong."""
        from .schema import report_fields

        return cls(**report_fields(data, {f.name for f in dataclasses.fields(cls)}))


def source_field(line: Any, near: str | None = None) -> dict[str, Any] | None:
    """A ``SourceLine`` as ``Report.source``; ``near``: it is not the op's own line (``Birth.near``)."""
    if line is None:
        return None
    return {"file": line.file, "line": line.line, "text": line.text, **({"near": near} if near else {})}


# ------------------------------------------------------------------ renderers

def safe(report: Report) -> Report:
    """A copy whose every string is safe on a terminal (escape sequences shown, not obeyed)."""
    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return printable(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(clean(v) for v in value)
        if isinstance(value, TensorSummary):
            return dataclasses.replace(value, **{f.name: clean(getattr(value, f.name))
                                                 for f in dataclasses.fields(value)
                                                 if isinstance(getattr(value, f.name), (str, tuple, TensorSummary))})
        return value

    return dataclasses.replace(report, **{f.name: clean(getattr(report, f.name)) for f in dataclasses.fields(report)})


def title(report: Report) -> str:
    rank = f"rank {report.rank} · " if report.rank is not None else ""
    step = f"step {report.step} · " if report.step is not None else ""
    return f"tensor_dap trigger · {rank}{step}{report.headline}"


def _facts(report: Report) -> list[tuple[str, str]]:
    """(label, value) lines under the title: where, the op and line, the diagnosis, the numbers."""
    facts = []
    if report.where:
        facts.append(("where", report.where))
    if report.origin:
        facts.append(("op", report.origin))
    if report.diagnosis:
        facts.append(("diagnosis", report.diagnosis))
    if report.loss is not None or report.loss_history:
        loss = fmt_num(report.loss) if report.loss is not None else "?"
        history = report.loss_history[-8:]
        recent = ", ".join(fmt_num(v) for v in history) if len(history) > 1 or report.loss is None else ""
        facts.append(("loss", f"{loss}" + (f" (last {min(8, len(report.loss_history))}: {recent})" if recent else "")))
    if report.lr:
        same = len(report.lr) > 1 and all(v == report.lr[0] for v in report.lr)  # (HF: decay and no-decay groups)
        facts.append(("lr", f"{fmt_num(report.lr[0])} (all {len(report.lr)} parameter groups)" if same
                      else ", ".join(fmt_num(v) for v in report.lr)))
    if report.max_abs is not None:
        of = f" ({report.max_abs_of})" if report.max_abs_of else ""
        facts.append(("max |value|", fmt_num(report.max_abs) + of))
    return facts


def to_text(report: Report) -> str:
    """The plain-text form: log records, exception messages, report.txt."""
    from ..summary.line import one_line

    report = safe(report)
    lines = [title(report)]
    lines += [f"  {label}: {value}" for label, value in _facts(report)]
    for note in report.notes:
        lines.append(f"  note: {note}")
    section = None
    for sec, name, s in report.tensors:
        if sec != section:
            lines.append(f"  {sec}:")
            section = sec
        lines.append(f"    {name}: {one_line(s)}")
    if report.bundle:
        lines.extend(f"  {line}" for line in _bundle_lines(report))
    return "\n".join(lines)


def _bundle_lines(report: Report) -> list[str]:
    bundle = report.bundle
    model, optimizer = (report.names.get(key, key) for key in ("model", "optimizer"))  # as the program holds them
    call = {"loop": model, "closure": f"{model}, closure"}.get(report.mode or "step", f"{model}, step_fn")
    if report.lr:  # an optimizer was known (a loop updating by hand has none): its update is replayed too
        call += f", optimizer={optimizer}" if report.mode == "loop" or optimizer != "optimizer" else ", optimizer"
    lines = [f"incident bundle: {bundle}", f"reproduce it: tensor_dap.replay({bundle!r}, {call})"]
    if report.program and report.mode in ("loop", "closure"):  # the script that trained builds the model and
        # optimizer (and the closure, which only it has); a w.step bundle needs its step function: code
        lines.append(f"  or with no code: tensor-dap run --replay {shlex.quote(str(bundle))} "
                     f"{shlex.join([shown_path(report.program), *report.args])}")
    return [*lines, f"show this report again: tensor-dap replay {shlex.quote(str(bundle))}"]


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)


def to_rich(report: Report) -> Any:
    """A rich Panel: where it happened, then one table row per tensor. Every string is plain Text."""
    from rich.text import Text

    from ..summary.tables import summaries_table

    report = safe(report)
    parts: list[Any] = []
    for label, value in _facts(report):
        style = "bold red" if label in ("where", "op") else "bold yellow" if label == "diagnosis" else ""
        parts.append(Text.assemble((f"{label}: ", "bold"), (value, style)))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    sections: dict[str, list[tuple[str, TensorSummary]]] = {}
    for sec, name, s in report.tensors:
        sections.setdefault(sec, []).append((name, s))
    for sec, rows in sections.items():
        parts.append(summaries_table(((Text(name), s) for name, s in rows), title=Text(sec)))  # type: ignore[misc]
    if report.bundle:
        parts.append(Text("\n".join(_bundle_lines(report))))
    return _Titled(report, parts)


class _Titled:
    """The report's panel, its title whole: a title wider than the terminal would be cut mid-word by rich (the module
    and op at its end lost), so there the headline opens the panel instead, under a short title."""

    def __init__(self, report: Report, parts: list[Any]) -> None:
        self.report, self.parts = report, parts

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        full, parts = title(self.report), self.parts
        if cell_len(full) + 6 > options.max_width:  # (the border's corners and the spaces around the title)
            full, rest = full.split(" · ", 1)
            parts = [Text(rest, "bold"), *parts]  # "step 3 · NaN born in ...", wrapped at words
        yield Panel(Group(*parts), title=Text(full), title_align="left", border_style="red")


def emit(report: Report, *, show: bool = True) -> None:
    """Print the rich panel on stderr when ``show`` (else the exception raised next carries the report) and log the
    report to the program's handlers that write elsewhere (``log_unprinted``). Never raises."""
    try:
        from ..console import log_unprinted

        log_unprinted(logger, logging.ERROR, to_text(report))
    except Exception as exc:  # noqa: BLE001 - reporting must never break training
        logger.debug("could not log the trigger report: %r", exc)
    if not show:
        return
    try:
        from ..console import say

        with rng_kept(numpy=False, torch=False):  # rich draws link ids from `random`: the user's stream is kept
            say(to_rich(report))
    except Exception as exc:  # noqa: BLE001 - a broken terminal must not break training
        logger.debug("could not print the trigger panel: %r", exc)
