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

from .. import runner
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
        stats = pstats.Stats(self._profile)
        rows = _rows(stats)
        top = self.options.top
        callers = [r for r in rows if not _plumbing(r[0], r[2])]
        return [_table("top functions by cumulative time (import machinery left out; it is in the file)",
                       sorted(callers, key=lambda r: -r[4])[:top]),
                _table("top functions by own time", sorted(rows, key=lambda r: -r[3])[:top])]


# Frames every import or ``exec`` passes through: by cumulative time each is as large as what it ran, so on a
# real script (minGPT: 7 of the top 15) they push the program's own functions off the table. Own time keeps them.
_PLUMBING = ("<built-in method builtins.exec>", "<built-in method builtins.__import__>")


def _plumbing(file: str, name: str) -> bool:
    return file.startswith("<frozen importlib") or (file == "~" and name in _PLUMBING)


def _ours(file: str) -> bool:
    """The frames that run the program (tensor_dap's runner, runpy): in the file, not in the tables."""
    return runner.is_runner_frame(file)


def _rows(stats: pstats.Stats) -> list[tuple[str, int, str, float, float, int]]:
    """(file, line, function, own seconds, cumulative seconds, calls) for every function of the program."""
    out = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if not _ours(file):
            out.append((file, line, name, own, cumulative, calls))
    return out


def _table(title: str, rows: list[tuple[str, int, str, float, float, int]]) -> Any:
    t = table(title, "cumulative", "own", "calls", "function", right=("cumulative", "own", "calls"))
    for file, line, name, own, cumulative, calls in rows:
        place = plain(name) if file == "~" else where(file, line, name)
        t.add_row(seconds(cumulative), seconds(own), str(calls), place)
    return t
