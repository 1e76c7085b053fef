"""Allocation sites, as data: tracemalloc's live Python allocations and the torch profiler's memory events.

A site is a line of the program (``file``, ``line``, ``function``) with the bytes and the
number of allocations made there. For tracemalloc the site is the innermost frame that is
not in the standard library, site-packages or tensor_dap (the line of *your* code that
caused it), with the full traceback kept beside it.
"""

from __future__ import annotations

import os
import re
import sys
import tracemalloc
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional

from ..libraries import is_user_file
from .source_defs import functions_of

_PY_EVENT = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>.+)$")  # torch's python-stack events


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    function: Optional[str]
    size_bytes: int
    count: int
    traceback: tuple[tuple[str, int], ...] = ()
    op: Optional[str] = None  # the torch operator that allocated (profiler sites)
    backward: bool = False  # allocated by autograd for what the function's forward made (``backward_sites``)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line, "function": self.function,
                               "size_bytes": self.size_bytes, "count": self.count,
                               "traceback": [{"file": f, "line": n} for f, n in self.traceback]}
        if self.op is not None:
            out["op"] = self.op
        if self.backward:
            out["backward"] = True
        return out


def _is_library(file: str) -> bool:
    return not is_user_file(file)


def function_at(file: str, line: int) -> Optional[str]:
    """The innermost function whose body holds ``file:line`` (None at module level)."""
    found = enclosing_def(file, line)
    return found[1] if found else None


def enclosing_def(file: str, line: int) -> Optional[tuple[int, str]]:
    """(``def`` line, dotted name) of the innermost function whose body holds ``file:line``; None at module
    level or where the file cannot be read."""
    best = None
    for first, last, name in functions_of(file):
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, name)
    return best


def def_line(line: int, function: Optional[str]) -> Optional[int]:
    """The line to show for a function torch's events name: its ``def`` line; none for a module, whose line is
    where its frame stood when recording began (also for its optimizer's calls: ``<module> (AdamW.step)``)."""
    return None if not line or (function or "").startswith("<module>") else line


@lru_cache(maxsize=4096)  # (an event's frame: one of a few functions, thousands of events)
def named_frame(frame: Optional[tuple[str, int, str]]) -> Optional[tuple[str, int, str]]:
    """A function of the program as torch's Python events name it, by its ``def`` line and dotted name
    (``MLP.forward``, not ``forward``); a comprehension inside one counts as that function (get_batch's list
    comprehensions are get_batch), a lambda is its own, named after where it was written (makemore's
    ``self.mlpf = lambda x: ...``, called by every forward, is ``Block.__init__.<lambda>``, not ``__init__``)."""
    if frame is None:
        return None
    file, line, function = frame
    if line and function == "<lambda>":
        found = enclosing_def(file, line)
        return file, line, f"{found[1]}.<lambda>" if found else "<lambda>"
    if line and function != "<module>":
        found = enclosing_def(file, line)
        if found is not None:
            return file, *found
    return frame


def tracemalloc_sites(snapshot: tracemalloc.Snapshot, top: int) -> tuple[list[Site], int]:
    """The ``top`` sites holding the most live bytes in ``snapshot``, attributed to the program's own lines,
    and the live bytes whose traceback holds no line of the program (imports, libraries' own state, or a
    line deeper than the traceback's frames)."""
    grouped: dict[tuple[str, int], list[Any]] = {}
    outside = 0
    for stat in snapshot.statistics("traceback"):
        frames = [(f.filename, f.lineno) for f in reversed(stat.traceback)]  # innermost first
        own = next((fr for fr in frames if not _is_library(fr[0])), None)
        if own is None:
            outside += stat.size
            continue
        entry = grouped.setdefault(own, [0, 0, frames, 0])
        entry[0] += stat.size
        entry[1] += stat.count
        if stat.size > entry[3]:  # keep the traceback of the biggest contributor
            entry[2], entry[3] = frames, stat.size
    ranked = sorted(grouped.items(), key=lambda kv: -kv[1][0])[:top]
    return [Site(os.path.abspath(file), line, function_at(file, line), size, count, tuple(frames))
            for (file, line), (size, count, frames, _) in ranked], outside


@lru_cache(maxsize=1024)
def _real_path(file: str) -> str:
    """torch names Python frames relative to the ``sys.path`` entry they were found on: make them absolute."""
    if os.path.isabs(file):
        return file
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), file)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return file


def user_frame(event: Any) -> Optional[tuple[str, int, str]]:
    """The innermost Python function of the program above a profiler event (torch records
    Python calls as events named ``file(line): function``, ``line`` being where it starts)."""
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        m = _PY_EVENT.match(parent.name)
        if m and not _is_library(_real_path(m.group("file"))):
            return _real_path(m.group("file")), int(m.group("line")), m.group("function")
        parent = getattr(parent, "cpu_parent", None)
    return None


def torch_sites(prof: Any, top: int, frame_of: Callable[[Any], tuple[Any, bool]]) -> list[Site]:
    """Bytes each operator allocated on the CPU during the recorded steps, by operator and calling function.
    ``frame_of``: (function named by its ``def``, is its backward) of an event: ``backward_sites.Attribution.named``,
    which builds on ``user_frame`` and ``named_frame`` here (so it is handed in, not imported).

    These are allocations made (the sum of sizes), not memory live at one moment: a tensor
    allocated and freed every step counts every time.
    """
    grouped: dict[tuple[str, int, Optional[str], str, bool], list[int]] = {}
    for event in prof.events():
        size = getattr(event, "self_cpu_memory_usage", 0) or 0
        if size <= 0 or event.name.startswith(("[memory]", "<")) or _PY_EVENT.match(event.name):
            continue  # allocator records and Python calls; the operators that allocated are what count
        found, backward = frame_of(event)
        file, line, function = found or ("<torch internals>", 0, None)
        entry = grouped.setdefault((file, line, function, event.name, backward), [0, 0])
        entry[0] += size
        entry[1] += 1
    ranked = sorted(grouped.items(), key=lambda kv: -kv[1][0])[:top]
    return [Site(file, line, function, size, count, op=op, backward=backward)
            for (file, line, function, op, backward), (size, count) in ranked]


def peak_rss() -> Optional[int]:
    """The process's peak resident set size in bytes (None where the OS does not say)."""
    from ..probe.memory import memory_report

    try:
        return memory_report().peak_rss
    except Exception:  # noqa: BLE001 - a missing /proc is not worth failing a profile for
        return None

