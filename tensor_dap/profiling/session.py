"""A profile session: run a program unchanged under one recorder, then write its files and a summary.

Every mode is a ``Recorder`` (start, stop, write, render). The session owns the order of
things: the output folder is made before the program starts (so an unwritable folder costs
nothing), the recorder stops even when the program crashes or is interrupted, and the exit
code is the program's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .. import runner
from .output import run_folder, write_manifest
from .recorder import Options, Recorder


@dataclass
class Result:
    folder: Path
    files: list[str]
    exit_code: int
    renderables: list[Any]
    notes: list[str]
    error: Optional[str] = None  # why the run counts as failed although the program may have succeeded


def _recorder_class(mode: str) -> type[Recorder]:
    if mode == "cpu":
        from .cpu import CpuRecorder

        return CpuRecorder
    if mode == "line":
        from .line import LineRecorder

        return LineRecorder
    if mode == "torch":
        from .trace import TorchRecorder

        return TorchRecorder
    if mode == "memory":
        from .memory import MemoryRecorder

        return MemoryRecorder
    raise ValueError(f"unknown profile mode {mode!r}")


MODES = ("cpu", "line", "torch", "memory")


def prepare(mode: str, target: runner.Target, options: Options, out: Optional[str]) -> Recorder:
    """The recorder for ``mode`` with its run folder made; UsageError for a bad option or folder."""
    cls = _recorder_class(mode)
    check = getattr(cls, "check_options", None)
    if check is not None:
        check(options)  # before the folder exists: a typo leaves nothing behind
    return cls(run_folder(out, target.label), target, options)


def profile_program(recorder: Recorder, argv: list[str]) -> Result:
    """Run the target under ``recorder``; write what was recorded, whatever way the program ended."""
    started = time.time()
    clock = time.perf_counter()
    recorder.start()
    try:
        code = runner.run(recorder.target, argv)
    finally:
        recorder.stop()
    duration = time.perf_counter() - clock
    files = recorder.write()
    code = recorder.exit_code(code)
    program = recorder.target.path or f"-m {recorder.target.module}"
    files.append(write_manifest(recorder.folder, mode=recorder.mode, program=program, argv=list(argv),
                                started=started, duration=duration, exit_code=code, files=list(files),
                                notes=recorder.notes).name)
    return Result(recorder.folder, files, code, recorder.render(), recorder.notes, recorder.error)
