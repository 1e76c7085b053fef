"""The time a cProfile file spent importing, as JSON for the VS Code extension's profile page:
``python -m tensor_dap.profiling.import_json FILE.prof``.

A short profiled run of a training script is mostly imports (``import_time``); the terminal's tables leave
them out, and the extension's page offers the same with this estimate (the extension reads the file itself;
the estimate is computed here, in one place). Schema, version 1::

    {"format": "tensor_dap.profiling.import_json", "version": 1,
     "importing": 2.1, "profiled": 4.3,       # seconds spent importing, of the seconds profiled
     "functions": [["train.py", 9, "train_step", 0.01, 0.9], ...]}
                                               # [file, line, name, own, cumulative] with imports taken out, for
                                               # every function of the program that ran outside imports; the
                                               # others (importlib, module bodies, exec) are left out

Errors: an unreadable or foreign file prints one line ``tensor-dap: error: FILE: ...`` on stderr and exits
with status 2.
"""

from __future__ import annotations

import sys
from typing import Any

from .cpu import profiler_frame
from .export import ExportError, read_pstats, run_cli
from .import_time import ImportTime, program_rows

FORMAT = "tensor_dap.profiling.import_json"
VERSION = 1


def import_split(path: str) -> dict[str, Any]:
    """The JSON model of ``path``'s time spent importing (raises ExportError when it is not a pstats file)."""
    stats = read_pstats(path)
    try:
        imports = ImportTime(stats)
        rows = program_rows(stats, imports, profiler_frame)
        spent, profiled = imports.total()
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ExportError(f"not a pstats (cProfile) table: {type(exc).__name__}: {exc}") from None
    return {"format": FORMAT, "version": VERSION, "importing": spent, "profiled": profiled,
            "functions": [[file, line, name, own, cumulative] for file, line, name, own, cumulative, _ in rows]}


def main(argv: list[str] | None = None) -> int:
    return run_cli(argv, "python -m tensor_dap.profiling.import_json FILE  (a .prof file)", import_split)


if __name__ == "__main__":
    sys.exit(main())
