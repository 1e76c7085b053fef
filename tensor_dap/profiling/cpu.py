"""``--mode cpu``: cProfile over the whole program, saved as a standard pstats file.

``cprofile.prof`` opens with ``pstats.Stats``, snakeviz, gprof2dot and the VS Code
extension. cProfile sees the thread that runs the program (not DataLoader workers or other
threads) and adds a constant cost per Python call, so very call-heavy code looks slower
than it is; use ``--mode torch`` to see time inside PyTorch operators.
"""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

from rich.text import Text

from .. import runner
from ..libraries import is_user_file
from .import_time import ImportTime, Row, program_rows
from .output import CPROFILE
from .recorder import Recorder
from .tables import plain, seconds, table, where


class CpuRecorder(Recorder):
    mode = "cpu"

    def start(self) -> None:
        self._profile = cProfile.Profile()
        self._profile.enable()

    def stop(self) -> None:
        self._profile.disable()

    def write(self) -> list[str]:
        self._profile.dump_stats(str(self.folder / CPROFILE))
        return [CPROFILE]

    def render(self) -> list[Any]:
        """The tables with the time spent importing taken out (``import_time``): on a short run it is most of
        the profile, and not what the user profiles for. The file keeps every call as it was."""
        stats = pstats.Stats(self._profile)
        imports = ImportTime(stats.stats)  # type: ignore[attr-defined]
        rows = program_rows(stats.stats, imports, profiler_frame)  # type: ignore[attr-defined]
        top = self.options.top
        yours = [r for r in rows if r[0] != "~" and is_user_file(r[0])]  # ("~": a builtin)
        spent, profiled = imports.total()
        out: list[Any] = []
        if spent > 0.05 * profiled:
            out.append(Text(f"imports took {seconds(spent)} of the {seconds(profiled)} profiled: left out of the "
                            f"tables below (an estimate from cProfile's caller totals; {CPROFILE} has every call)"))
        out += [_table("top functions by cumulative time", sorted(rows, key=lambda r: -r[4])[:top]),
                _table("top functions by own time", sorted(rows, key=lambda r: -r[3])[:top])]
        if yours:
            out.append(_table("your code by cumulative time", sorted(yours, key=lambda r: -r[4])[:top]))
        return out


def profiler_frame(file: str) -> bool:
    """The frames that run the program (tensor_dap's runner, runpy) and stop this profile: in the file, not in
    the tables."""
    return runner.is_runner_frame(file) or file == __file__


def _table(title: str, rows: list[Row]) -> Any:
    t = table(title, "cumulative", "own", "calls", "function", right=("cumulative", "own", "calls"))
    for file, line, name, own, cumulative, calls in rows:
        place = plain(name) if file == "~" else where(file, line, name)
        t.add_row(seconds(cumulative), seconds(own), str(calls), place)
    return t
