"""The trigger report: one model, three renderers (text, JSON, a rich panel).

Triggers and localization fill a ``Report`` with ``TensorSummary`` objects; the renderers
here only lay them out. ``emit`` is the one place a report leaves the process: the
``tensor_dap.triggers`` logger always, the console when a person may be watching.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from ..summary import TensorSummary, from_json_number, jsonable

logger = logging.getLogger("tensor_dap.triggers")
# A library must not print through logging's last-resort handler: the console shows the
# report itself, and users who configure logging get the record as well.
logger.addHandler(logging.NullHandler())

PHASES = ("input", "forward", "backward", "optimizer", "loss")


@dataclass
class Report:
    """What fired, where, and the summaries of the tensors involved. Pure data."""

    kind: str  # "nonfinite", "above", "below", "spike"
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

    @property
    def where(self) -> str:
        """'backward of encoder.layers.2.attn (Attention)'-style location, or ''."""
        parts = []
        if self.phase:
            parts.append(self.phase)
        if self.module is not None:
            name = self.module or "<root>"
            typ = f" ({self.module_type})" if self.module_type else ""
            parts.append(f"{'of ' if self.phase else ''}{name}{typ}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["tensors"] = [(sec, name, TensorSummary.from_dict(s)) for sec, name, s in data.get("tensors", [])]
        kwargs["loss"] = from_json_number(data.get("loss"))
        kwargs["notes"] = list(data.get("notes", []))
        return cls(**kwargs)


# ------------------------------------------------------------------ renderers

def title(report: Report) -> str:
    rank = f"rank {report.rank} · " if report.rank is not None else ""
    step = f"step {report.step} · " if report.step is not None else ""
    return f"tensor_dap trigger · {rank}{step}{report.headline}"


def to_text(report: Report) -> str:
    """The plain-text form: log records, exception messages, report.txt."""
    from ..summary.line import one_line

    lines = [title(report)]
    if report.where:
        lines.append(f"  where: {report.where}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    section = None
    for sec, name, s in report.tensors:
        if sec != section:
            lines.append(f"  {sec}:")
            section = sec
        lines.append(f"    {name}: {one_line(s)}")
    if report.bundle:
        lines.extend(f"  {line}" for line in _bundle_lines(report.bundle))
    return "\n".join(lines)


def _bundle_lines(bundle: str) -> list[str]:
    return [f"incident bundle: {bundle}",
            f"reproduce it: tensor_dap.replay({bundle!r}, model, step_fn, optimizer)",
            f"show this report again: tensor-dap replay {bundle}"]


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)


def to_rich(report: Report) -> Any:
    """A rich Panel: where it happened, then one table row per tensor."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    from ..summary.tables import summaries_table

    parts: list[Any] = []
    if report.where:
        parts.append(Text.assemble(("where: ", "bold"), (report.where, "bold red")))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    sections: dict[str, list[tuple[str, TensorSummary]]] = {}
    for sec, name, s in report.tensors:
        sections.setdefault(sec, []).append((name, s))
    for sec, rows in sections.items():
        parts.append(summaries_table(rows, title=sec))
    if report.bundle:
        parts.append(Text("\n".join(_bundle_lines(report.bundle))))
    return Panel(Group(*parts), title=title(report), title_align="left", border_style="red")


def emit(report: Report, *, show: bool = True) -> None:
    """Log the report; also print the rich panel on stderr when ``show``. Never raises."""
    try:
        logger.error("%s", to_text(report))
    except Exception as exc:  # noqa: BLE001 - reporting must never break training
        logger.debug("could not log the trigger report: %r", exc)
    if not show:
        return
    state = random.getstate()  # rich draws link ids from `random`: keep the user's stream untouched
    try:
        from ..console import make_console

        make_console(stderr=True).print(to_rich(report))
    except Exception as exc:  # noqa: BLE001 - a broken terminal must not break training
        logger.debug("could not print the trigger panel: %r", exc)
    finally:
        random.setstate(state)
