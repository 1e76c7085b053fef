"""What a demo scenario is: a planted bug, the tool that should catch it, and what it found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..folders import INCIDENTS


@dataclass
class Context:
    """Where a scenario writes: ``root`` holds ``.tensor_dap/`` (incidents), ``folder`` this tour's other files."""

    root: Path
    folder: Path

    @property
    def incidents(self) -> Path:
        return self.root / INCIDENTS


@dataclass
class Outcome:
    """``caught``: the tool found the planted bug (or wrote its file); ``evidence``: what it said, in short."""

    caught: bool
    evidence: list[str]
    shown: list[Any] = field(default_factory=list)  # rich renderables: the tool's own output
    artifacts: list[tuple[str, Path, str]] = field(default_factory=list)  # (what, path, how to open it)


@dataclass(frozen=True)
class Scenario:
    name: str
    bug: str  # the planted bug, in one line (or, for a file the tour writes, what it shows)
    tool: str  # what catches it
    run: Callable[[Context], Outcome]
    planted: bool = True  # False: no bug, the scenario writes a file to open (a TensorBoard run, a profile)
