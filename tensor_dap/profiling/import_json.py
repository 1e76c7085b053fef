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

import json
import sys
from typing import Any

from .cpu import profiler_frame
from .export import ExportError, read_pstats
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
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m tensor_dap.profiling.import_json FILE  (a .prof file)", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(json.dumps(import_split(args[0]), allow_nan=False, separators=(",", ":")) + "\n")
    except ExportError as exc:
        print(f"tensor-dap: error: {args[0]}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, RecursionError, MemoryError) as exc:  # (ValueError: a time that is NaN or Inf)
        print(f"tensor-dap: error: {args[0]}: not a readable profile ({type(exc).__name__})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
