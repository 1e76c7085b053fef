"""``--mode line``: line_profiler on the functions named with ``--function`` or marked ``@profile`` (with
neither, the script whole: its top-level code and its functions).

``line.lprof`` is the file ``python -m line_profiler line.lprof`` prints and the VS Code
extension shows beside the source. Only the thread that runs the program is profiled.
If none of the named functions was ever defined and nothing was marked, the run is an
error (exit 2) after the program ends; names that were found are profiled either way.
"""

from __future__ import annotations

import linecache
from typing import Any

from ..errors import UsageError
from ..format import shown_path
from . import marks
from .line_targets import Installed, Targets, parse_spec
from .output import LINE
from .recorder import Options, Recorder
from .tables import plain, seconds, table, where

MAX_FUNCTIONS = 10  # tables printed; the file holds them all


class LineRecorder(Recorder):
    mode = "line"

    @staticmethod
    def check_options(options: Options) -> None:
        for text in options.functions:
            parse_spec(text)
        try:
            import line_profiler  # noqa: F401
        except ImportError:
            raise UsageError("--mode line needs line_profiler (pip install line_profiler)") from None

    def start(self) -> None:
        from line_profiler import LineProfiler

        self._profiler = LineProfiler()
        self._add_callable = getattr(self._profiler, "add_callable", self._profiler.add_function)
        whole = not self.options.functions
        self._targets = Targets([parse_spec(t) for t in self.options.functions], self.target, whole_script=whole)
        self._added = 0
        self._profiled: dict[Any, Any] = {}  # a function's own code -> the copy line_profiler traces
        marks.set_line_marker(self._add)
        self._hooks = Installed(self._targets, self._add)
        self._profiler.enable_by_count()

    def _add(self, func: Any) -> Any:
        """Profile ``func``. A function made again from code already profiled (a nested ``def`` runs at each call
        of the function around it) takes the profiled code: adding it to line_profiler again costs ~3 ms, and more
        for each time before (20,000 closures: 67 s)."""
        code = getattr(func, "__code__", None)
        profiled = self._profiled.get(code) if code is not None else None
        if profiled is not None:
            try:
                func.__code__ = profiled
                return func
            except (TypeError, ValueError):  # another closure layout: added as any other
                pass
        try:
            self._add_callable(func)
            self._added += 1
            if code is not None and getattr(func, "__code__", code) is not code:
                self._profiled[code] = func.__code__
        except Exception as exc:  # noqa: BLE001 - an odd callable is left unprofiled, the program runs on
            self.notes.append(f"could not profile {getattr(func, '__qualname__', func)!r}: {exc}")
        return func

    def stop(self) -> None:
        self._profiler.disable_by_count()
        self._hooks.remove()
        marks.set_line_marker(None)

    def write(self) -> list[str]:
        self._profiler.dump_stats(str(self.folder / LINE))
        return [LINE]

    def exit_code(self, program_code: int) -> int:
        self.notes.extend(self._targets.missing())
        if self._targets.whole_script:
            program = shown_path(self.target.path) if self.target.path else self.target.module
            self.notes.append(f"no --function: {program} profiled whole (its top-level code, functions and methods); "
                              f"--function NAME profiles chosen ones")
        if self._added:
            return program_code
        asked = ", ".join(self.options.functions)
        self.error = (f"no function was profiled: {asked} never defined" if asked else
                      "no function to profile: name one with --function NAME or mark it with @tensor_dap.profile")
        return program_code or 2

    def render(self) -> list[Any]:
        stats = self._profiler.get_stats()
        unit = stats.unit
        functions = []
        for (file, first, name), lines in stats.timings.items():
            total = sum(t for _, _, t in lines) * unit
            functions.append((total, file, first, name, lines))
        functions.sort(key=lambda f: -f[0])
        return [_function_table(f, unit, self.options.top) for f in functions[:MAX_FUNCTIONS] if f[4]]


def _function_table(function: tuple, unit: float, top: int) -> Any:
    total, file, first, name, lines = function
    title = where(file, first, name)
    title.append(f"  total {seconds(total)}")
    t = table("", "line", "hits", "time", "per hit", "% time", "source",
              right=("line", "hits", "time", "per hit", "% time"))
    t.title = title
    hottest = sorted(sorted(lines, key=lambda r: -r[2])[:top])
    source = [linecache.getline(file, lineno).rstrip() for lineno, _, _ in hottest]
    indent = min((len(text) - len(text.lstrip()) for text in source if text.strip()), default=0)
    for (lineno, hits, time), text in zip(hottest, source):
        line = plain(text[indent:])  # the body's own indentation kept, the function's dropped
        line.no_wrap, line.overflow = True, "ellipsis"  # one row a line: a long comment is cut, not wrapped
        t.add_row(str(lineno), str(hits), seconds(time * unit), seconds(time * unit / hits) if hits else "",
                  f"{100 * time * unit / total:.1f}" if total else "", line)
    return t
