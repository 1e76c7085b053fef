"""Rich renderables over summaries: the tables pdb commands and reports print."""

from __future__ import annotations

from typing import Iterable, Tuple

from rich.table import Table
from rich.text import Text

from ..format import dtype_name, fmt_bytes, fmt_num, fmt_shape
from .line import alarms, nonfinite_counts, one_line
from .model import TensorSummary


def summary_line(s: TensorSummary) -> Text:
    """The one-line form, with alarms in red."""
    line = Text(one_line(s))
    for token in alarms(s):
        line.highlight_words([token], style="bold red")
    if s.error:
        line.stylize("yellow")
    return line


def summary_table(s: TensorSummary, title: str = "") -> Table:
    """Every field of one summary, in the order a user scans them."""
    table = Table(title=title or None, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    approx = " (sampled)" if s.sampled else ""
    rows = [
        ("shape", fmt_shape(s.shape)),
        ("dtype", dtype_name(s.dtype)),
        ("device", s.device),
        ("numel", f"{s.numel:,}"),
        ("size", fmt_bytes(s.nbytes)),
        ("layout", s.layout),
    ]
    if s.has_stats:
        what = "" if s.stats_of == "values" else f" of {s.stats_of}"
        finite = " (finite values)" if s.nonfinite else ""
        rows += [
            ("min" + what, fmt_num(s.min)),
            ("max" + what, fmt_num(s.max)),
            ("mean" + finite + approx, fmt_num(s.mean)),
            ("std" + finite + approx, fmt_num(s.std)),
        ]
        rows += [(label, text) for label, text, _ in nonfinite_counts(s)]
    rows += [("requires_grad", str(s.requires_grad)), ("grad", one_line(s.grad) if s.grad else "None")]
    if s.notes:
        rows.append(("notes", ", ".join(s.notes)))
    if s.error:
        rows.append(("error", s.error))
    for name, value in rows:
        style = "bold red" if name in ("NaN", "+Inf", "-Inf") and value not in ("0", "≈0", "?") else None
        table.add_row(name, Text(value, style=style))
    return table


def summaries_table(rows: Iterable[Tuple[str, TensorSummary]], title: str = "") -> Table:
    """One row per named tensor."""
    table = Table(title=title or None, title_justify="left", box=None, pad_edge=False)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("summary")
    for name, s in rows:
        table.add_row(name, summary_line(s))
    return table
