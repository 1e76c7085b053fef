"""Profiler output files as versioned JSON: ``python -m tensor_dap.profiling.export FILE``.

Reads a cProfile/pstats file (``.prof``: a ``marshal`` dump) or a line_profiler file
(``.lprof``: a pickled ``LineStats``) and prints one JSON object on stdout. The VS Code
extension parses both formats itself; this is the reference reader it is tested against,
and its fallback for format variants it does not know. Standard library only: it imports
nothing from tensor_dap, never imports line_profiler, and unpickles nothing but the
``LineStats`` record (any other class in the file is refused, so a hostile ``.lprof``
cannot run code).

Schema, version 1 (``"format": "tensor_dap.profiling.export"``, ``"version": 1``). Times are
seconds, floats; ``file`` is the path as recorded by the profiler (``"~"`` for built-ins).

``"kind": "pstats"``::

    {"format": ..., "version": 1, "kind": "pstats",
     "total_time": 1.23,                     # sum of "own" over all functions
     "functions": [                          # in file order; "id" is the index in this list
       {"id": 0, "file": "train.py", "line": 9, "name": "train_step",
        "calls": 20,                         # all calls, recursive ones included
        "primitive_calls": 20,               # calls not made from inside itself
        "own": 0.01,                         # time in the function body (tottime)
        "cumulative": 0.9,                   # with everything it called (cumtime)
        "callers": [[3, 20, 20, 0.01, 0.9]]  # [caller id, calls, primitive calls, own, cumulative]
       }, ...]}

  A caller recorded by the pure-Python ``profile`` module carries only a call count:
  its entry is ``[caller id, calls, calls, 0.0, 0.0]``.

``"kind": "line_profiler"``::

    {"format": ..., "version": 1, "kind": "line_profiler",
     "unit": 1e-09,                          # the timer unit the file was written with
     "functions": [                          # sorted by file, then first line
       {"file": "/abs/train.py", "line": 9, "name": "train_step",
        "total": 0.02,                       # sum of its lines' time
        "lines": [[10, 20, 0.0065]]          # [line number, hits, time]
       }, ...]}

Errors: an unreadable, truncated or foreign file prints one line
``tensor-dap: error: FILE: ...`` on stderr and exits with status 2; never a traceback.
"""

from __future__ import annotations

import copyreg
import io
import json
import marshal
import math
import pickle
import sys
from typing import Any, Callable

FORMAT = "tensor_dap.profiling.export"
VERSION = 1


class ExportError(Exception):
    """The file cannot be read as a profile; the message says why."""


# ------------------------------------------------------------------ pstats

def pstats_to_dict(stats: Any) -> dict[str, Any]:
    """The JSON model of a pstats table ``{(file, line, name): (cc, nc, tt, ct, callers)}``."""
    if not isinstance(stats, dict):
        raise ExportError(f"not a pstats table (a {type(stats).__name__}, expected a dict)")
    ids: dict[tuple, int] = {}
    for key in stats:
        ids[_func_key(key)] = len(ids)
    functions = []
    total = 0.0
    for key, value in stats.items():
        file, line, name = _func_key(key)
        try:
            cc, nc, tt, ct, callers = value
        except (TypeError, ValueError):
            raise ExportError(f"entry for {name!r} is not (cc, nc, tt, ct, callers)") from None
        if not isinstance(callers, dict):
            raise ExportError(f"callers of {name!r} are not a dict")
        rows = []
        for caller, edge in callers.items():
            caller_id = ids.get(_func_key(caller))
            if caller_id is None:
                continue  # pstats files written by merging can name callers that have no entry
            if isinstance(edge, tuple) and len(edge) == 4:
                e_nc, e_cc, e_tt, e_ct = edge
                rows.append([caller_id, _int(e_nc), _int(e_cc), _float(e_tt), _float(e_ct)])
            else:  # profile.Profile records a bare call count
                rows.append([caller_id, _int(edge), _int(edge), 0.0, 0.0])
        total += _float(tt)
        functions.append({"id": ids[(file, line, name)], "file": file, "line": line, "name": name,
                          "calls": _int(nc), "primitive_calls": _int(cc), "own": _float(tt),
                          "cumulative": _float(ct), "callers": rows})
    return {"format": FORMAT, "version": VERSION, "kind": "pstats", "total_time": total,
            "functions": functions}


def _func_key(key: Any) -> tuple[str, int, str]:
    if not (isinstance(key, tuple) and len(key) == 3):
        raise ExportError(f"function key {key!r:.80} is not (file, line, name)")
    file, line, name = key
    return str(file), _int(line), str(name)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExportError(f"expected an integer, got {value!r:.40}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ExportError(f"expected a finite number, got {value!r:.40}")
    return float(value)


# ------------------------------------------------------------------ line_profiler

class _LineStats:
    """Stand-in for line_profiler's ``LineStats``: unpickling fills ``__dict__`` and runs nothing."""


# (module, name) pairs a .lprof may reference, and what each becomes. line_profiler has moved
# the class between modules over its versions; protocol 0/1 pickles go through copyreg.
_ALLOWED = {
    ("line_profiler.line_profiler", "LineStats"): _LineStats,
    ("line_profiler", "LineStats"): _LineStats,
    ("line_profiler._line_profiler", "LineStats"): _LineStats,
    ("copyreg", "_reconstructor"): copyreg._reconstructor,  # only ever reaches the classes here
    ("builtins", "object"): object,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise ExportError(f"refusing to load {module}.{name}: only line_profiler's LineStats is allowed")
        return found


def lprof_to_dict(stats: Any) -> dict[str, Any]:
    """The JSON model of a line_profiler ``LineStats`` (``timings`` and ``unit``)."""
    timings = getattr(stats, "timings", None)
    unit = getattr(stats, "unit", None)
    if not isinstance(timings, dict) or isinstance(unit, bool) or not isinstance(unit, (int, float)):
        raise ExportError("not a line_profiler LineStats record (no timings/unit)")
    functions = []
    for key, lines in timings.items():
        if not (isinstance(key, tuple) and len(key) == 3 and isinstance(lines, list)):
            raise ExportError(f"timings entry {key!r:.80} is not (file, line, name) -> [lines]")
        file, first, name = str(key[0]), _int(key[1]), str(key[2])
        rows = []
        for entry in lines:
            if not (isinstance(entry, tuple) and len(entry) == 3):
                raise ExportError(f"a line of {name!r} is not (line, hits, time)")
            rows.append([_int(entry[0]), _int(entry[1]), _float(entry[2]) * float(unit)])
        rows.sort(key=lambda r: r[0])
        functions.append({"file": file, "line": first, "name": name,
                          "total": sum(r[2] for r in rows), "lines": rows})
    functions.sort(key=lambda f: (f["file"], f["line"], f["name"]))
    return {"format": FORMAT, "version": VERSION, "kind": "line_profiler", "unit": float(unit),
            "functions": functions}


# ------------------------------------------------------------------ files

def export(path: str) -> dict[str, Any]:
    """Read ``path`` (pstats or line_profiler, told apart by content) into the JSON model."""
    data = _read(path)
    if data[:1] == b"\x80" or data[:1] in (b"(", b"c"):  # a pickle: PROTO, or protocol 0/1 opening
        return lprof_to_dict(_load_pickle(data))
    return pstats_to_dict(_marshalled_table(data, "not a pstats (cProfile) or line_profiler file"))


def read_pstats(path: str) -> dict[Any, Any]:
    """The table of a pstats (cProfile) file, as ``pstats.Stats.stats`` holds it."""
    return _marshalled_table(_read(path), "not a pstats (cProfile) file")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ExportError(exc.strerror or str(exc)) from None
    if not data:
        raise ExportError("the file is empty")
    return data


def _marshalled_table(data: bytes, what: str) -> dict[Any, Any]:
    try:
        table = marshal.loads(data)
    except (EOFError, ValueError, TypeError) as exc:
        raise ExportError(f"{what}: {exc}") from None
    if not isinstance(table, dict):
        raise ExportError(what)
    return table


def _load_pickle(data: bytes) -> Any:
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - any broken pickle is one clear error
        raise ExportError(f"not a readable line_profiler file: {type(exc).__name__}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    return run_cli(argv, "python -m tensor_dap.profiling.export FILE  (a .prof or .lprof file)", export)


def run_cli(argv: list[str] | None, usage: str, read: Callable[[str], dict[str, Any]]) -> int:
    """``read(FILE)`` printed as one JSON line; a usage or file error is one line on stderr and status 2."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    try:
        model = read(args[0])
        sys.stdout.write(json.dumps(model, allow_nan=False, separators=(",", ":")) + "\n")
    except ExportError as exc:
        print(f"tensor-dap: error: {args[0]}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, RecursionError, MemoryError) as exc:  # (ValueError: a time that is NaN or Inf)
        print(f"tensor-dap: error: {args[0]}: the file is too deeply nested, too large or holds a time that is not "
              f"a number ({type(exc).__name__})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
