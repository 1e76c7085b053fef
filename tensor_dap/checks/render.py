"""Rich renderables over check results: one result as a table with its findings, several as an overview.

Nothing here computes anything about a model or data; it only lays out a ``CheckResult``.
Every string that came from user data (names, keys, columns) is shown through ``printable``
inside a ``Text``, so control characters and ``[...]`` never act on the terminal.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..console import make_console
from ..format import fmt_num, fmt_shape, printable

if TYPE_CHECKING:  # the data imports this view lazily; the view never imports the data at run time
    from .result import CheckResult

_STYLE = {"ok": "green", "info": "dim", "warning": "yellow", "problem": "bold red"}
_MARK = {"ok": "✓ ok", "info": "· info", "warning": "! warning", "problem": "✗ problem"}


def _table(title: str | None = None, **kwargs: Any) -> Table:
    return Table(title=title, title_justify="left", box=None, pad_edge=False, **kwargs)


def cell(value: Any) -> Text:
    """One value of a detail row as text: numbers grouped, floats short, shapes in brackets, None as '-'."""
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, int):
        return Text(f"{value:,}")
    if isinstance(value, float):
        return Text(fmt_num(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return Text(fmt_shape(value))
    if isinstance(value, (list, tuple)):
        return Text(", ".join(printable(v) for v in value))
    return Text(printable(value))


def verdict_text(verdict: str) -> Text:
    return Text(_MARK.get(verdict, verdict), style=_STYLE.get(verdict, ""))


def _numeric(result: CheckResult, i: int) -> bool:
    values = [row[i] for row in result.rows if row[i] is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def details(result: CheckResult) -> Table:
    """The detail table: one row per module, parameter, device, key... as the check laid them out."""
    table = _table()
    for i, name in enumerate(result.columns):
        table.add_column(name.replace("_", " "), justify="right" if _numeric(result, i) else "left",
                         no_wrap=i == 0)
    for row in result.rows:
        table.add_row(*(cell(v) for v in row))
    return table


def findings(result: CheckResult) -> Table:
    """Each finding: its level, the offender, what is wrong and (dimmed, on the next line) what to do."""
    table = _table(show_header=False)
    table.add_column("level", no_wrap=True)
    table.add_column("subject", style="bold")
    table.add_column("message")
    for f in result.findings:
        message = Text(printable(f.message))
        if f.advice:
            message.append("\n→ " + printable(f.advice), style="dim")
        table.add_row(verdict_text(f.level), Text(printable(f.subject)), message)
    return table


def render(result: CheckResult) -> Group:
    """A check's headline (name, verdict, summary), its detail table, then its findings."""
    head = Text(f"{result.check}  ", style="bold")
    head.append_text(verdict_text(result.verdict))
    head.append("  " + printable(result.summary))
    parts: list[Any] = [head]
    if result.rows:
        parts.append(details(result))
    if result.omitted_rows:
        parts.append(Text(f"… and {result.omitted_rows:,} more rows not shown", style="dim"))
    if result.findings:
        parts.append(findings(result))
    elif result.verdict == "ok":
        parts.append(Text("no problems found", style="green"))
    return Group(*parts)


def overview(results: Iterable[CheckResult], title: str = "checks") -> Table:
    """One line per check: its verdict, its summary and the offenders it named (what the demo ends with)."""
    table = _table(title=title)
    table.add_column("check", style="bold", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("summary")
    table.add_column("offenders")
    for r in results:
        named = [s for s in dict.fromkeys(r.subjects) if s]
        shown = ", ".join(printable(s) for s in named[:4]) + (f" (+{len(named) - 4})" if len(named) > 4 else "")
        table.add_row(r.check, verdict_text(r.verdict), Text(printable(r.summary)), Text(shown))
    return table


def as_text(result: CheckResult) -> str:
    """``render(result)`` as plain text (no colour, 120 columns), without the trailing newline."""
    buf = io.StringIO()
    make_console(buf).print(render(result))
    return buf.getvalue().rstrip("\n")
