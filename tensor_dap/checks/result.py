"""What every check returns: a verdict, findings that name each offender, a detail table, measured facts.

Pure data, like ``TensorSummary``: a check computes a ``CheckResult`` once, and every view is a
renderer over it (``render`` for the terminal, ``to_dict`` for JSON). A check never raises on
odd input: what it could not check becomes a finding.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..format import short_error
from ..summary import jsonable

OK, INFO, WARNING, PROBLEM = "ok", "info", "warning", "problem"
# A finding's level; the verdict is the worst level among the findings ("info" leaves it "ok").
LEVELS = (INFO, WARNING, PROBLEM)
VERDICTS = (OK, WARNING, PROBLEM)
MAX_FINDINGS = 50  # per check: past this, one finding says how many more there were
MAX_ROWS = 500  # rows of a detail table; ``omitted_rows`` counts the rest


@dataclass(frozen=True)
class Finding:
    """One thing a check found: how bad, about what, what is wrong, and what to do next."""

    level: str  # "info", "warning" or "problem"
    subject: str  # the offender: a parameter, module, column, key or package ("" for the whole input)
    message: str  # what is wrong, in one line
    advice: str = ""  # what to do about it

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "subject": self.subject, "message": self.message, "advice": self.advice}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check. ``rows`` hold plain values (numbers, strings, lists of ints, None)."""

    check: str  # "shapes", "devices", "gradients", "leakage", "label_leakage", "state_dict", "dataloader", "doctor"
    summary: str  # one line: what was checked and the headline numbers
    findings: tuple[Finding, ...] = ()
    columns: tuple[str, ...] = ()  # the detail table's column names (JSON keys of each row)
    rows: tuple[tuple[Any, ...], ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)  # the numbers the check measured, JSON-ready
    omitted_rows: int = 0  # detail rows left out to keep the result bounded

    @property
    def verdict(self) -> str:
        """'problem' if any finding is a problem, else 'warning' if any is a warning, else 'ok'."""
        levels = {f.level for f in self.findings}
        return PROBLEM if PROBLEM in levels else WARNING if WARNING in levels else OK

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    def of_level(self, level: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == level)

    @property
    def subjects(self) -> tuple[str, ...]:
        """The offenders named by warnings and problems, in order."""
        return tuple(f.subject for f in self.findings if f.level in (WARNING, PROBLEM))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (NaN/Inf as strings); rows become objects keyed by ``columns``."""
        return jsonable({
            "check": self.check,
            "verdict": self.verdict,
            "summary": self.summary,
            "findings": [f.to_dict() for f in self.findings],
            "columns": list(self.columns),
            "rows": [dict(zip(self.columns, row)) for row in self.rows],
            "omitted_rows": self.omitted_rows,
            "facts": dict(self.facts),
        })

    def __rich__(self) -> Any:
        from .render import render  # data never imports its views at module level

        return render(self)

    def __str__(self) -> str:
        """The rich view as plain text: ``print(result)`` in a script or a log."""
        from .render import as_text

        return as_text(self)


def result(check: str, summary: str, findings: Sequence[Finding] = (), *, columns: Sequence[str] = (),
           rows: Sequence[Sequence[Any]] = (), facts: Mapping[str, Any] | None = None) -> CheckResult:
    """A CheckResult with the findings capped at MAX_FINDINGS and the rows at MAX_ROWS (bounded output)."""
    findings = list(findings)
    if len(findings) > MAX_FINDINGS:  # keep the most severe, in their order, and count the rest
        rank = {PROBLEM: 0, WARNING: 1, INFO: 2}
        kept = set(sorted(range(len(findings)), key=lambda i: rank.get(findings[i].level, 3))[:MAX_FINDINGS - 1])
        rest = [f for i, f in enumerate(findings) if i not in kept]
        worst = min((f.level for f in rest), key=lambda level: rank.get(level, 3))
        findings = [f for i, f in enumerate(findings) if i in kept] + [
            Finding(worst, "", f"… and {len(rest)} more findings like these")]
    rows = [tuple(r) for r in rows]
    return CheckResult(check=check, summary=summary, findings=tuple(findings), columns=tuple(columns),
                       rows=tuple(rows[:MAX_ROWS]), facts=dict(facts or {}),
                       omitted_rows=max(0, len(rows) - MAX_ROWS))


def failed(check: str, exc: BaseException) -> CheckResult:
    """The result of a check that could not run at all on its input: one problem saying why."""
    return CheckResult(check=check, summary=f"{check}: could not run",
                       findings=(Finding(PROBLEM, "", f"the check failed: {short_error(exc, limit=200)}"),))


F = TypeVar("F", bound=Callable[..., CheckResult])


def never_raises(check: str) -> Callable[[F], F]:
    """A check reports what it could not do instead of raising into the caller's program."""
    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> CheckResult:
            signature.bind(*args, **kwargs)  # calling it wrong is a programming error: that one raises
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a check must never break the program it looks at
                return failed(check, exc)
        return checked  # type: ignore[return-value]
    return wrap


def names(items: Sequence[str], limit: int = 5) -> str:
    """'a, b, c' or 'a, b, c, d, e and 7 more': a bounded list of offenders for one line."""
    items = list(items)
    if len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])} and {len(items) - limit} more"


