"""What every profile mode is: a ``Recorder`` (start, stop, write, render) and the ``Options`` it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import runner


@dataclass
class Options:
    """What the command line says about a profile (each mode reads its own fields)."""

    functions: list[str] = field(default_factory=list)  # --mode line
    wait: int = 1  # --mode torch/memory: the step window
    warmup: int = 1
    active: int = 3
    top: int = 15  # rows in the summary tables
    frames: int = 8  # --mode memory: tracemalloc traceback depth


class Recorder:
    """One profiler. Subclasses record between ``start`` and ``stop`` and write into ``folder``."""

    mode = ""

    def __init__(self, folder: Path, target: runner.Target, options: Options) -> None:
        self.folder = folder
        self.target = target
        self.options = options
        self.notes: list[str] = []  # one-line remarks for the summary and the manifest
        self.error: Optional[str] = None  # set by exit_code when the profile itself failed

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def write(self) -> list[str]:
        """Write the files; return their names (relative to ``folder``)."""
        raise NotImplementedError

    def render(self) -> list[Any]:
        """Rich renderables summarizing what was recorded."""
        raise NotImplementedError

    def exit_code(self, program_code: int) -> int:
        return program_code
