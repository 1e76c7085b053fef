"""Every thread's Python stack, and the one line that says where a thread waits.

The first question of a multi-GPU hang is which rank is stuck, and where: in a collective
(``all_reduce`` called from ``train.py:88``) or on a line of the user's own code. Stacks come
from this process (``sys._current_frames``) or from a dump another process wrote
(``faulthandler``'s format, or ``py-spy dump``'s); either way ``where`` reads them the same.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Optional

from ..libraries import is_user_file

# Collectives and point-to-point calls live here; the innermost frame in it names the call.
_COLLECTIVES = os.path.join("torch", "distributed", "distributed_c10d.py")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def text(self) -> str:
        """The source line; only for absolute paths (linecache would look a bare name up on sys.path)."""
        return linecache.getline(self.file, self.line).strip() if os.path.isabs(self.file) else ""

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.func}"


@dataclass
class ThreadStack:
    """One thread: ``frames`` from the outermost call to the innermost (traceback order)."""

    name: str
    frames: list[Frame] = field(default_factory=list)
    main: bool = False


def live_stacks(*, skip_current: bool = True) -> list[ThreadStack]:
    """This process's threads now (the main thread first); the calling thread left out with ``skip_current``."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    current = threading.get_ident()
    out = []
    for ident, frame in sys._current_frames().items():
        if skip_current and ident == current:
            continue
        frames = []
        f = frame
        while f is not None:
            frames.append(Frame(f.f_code.co_filename, f.f_lineno or 0, f.f_code.co_name))
            f = f.f_back
        frames.reverse()
        out.append(ThreadStack(names.get(ident, f"thread {ident:#x}"), frames, main=ident == main))
    out.sort(key=lambda s: not s.main)
    return out


def render(stacks: list[ThreadStack]) -> str:
    """Stacks as Python prints tracebacks (most recent call last), each thread headed by its name and where it is."""
    parts = []
    for s in stacks:
        lines = [f"Thread {s.name!r}{' (main)' if s.main else ''}: {where(s)}",
                 "Traceback (most recent call last):"]
        for f in s.frames:
            lines.append(f'  File "{f.file}", line {f.line}, in {f.func}')
            if f.text:
                lines.append(f"    {f.text}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)( \[[^\]]*\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_SPY_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?')
_SPY_FRAME = re.compile(r"^\s+(\S.*) \((.*):(\d+)\)$")


def parse_dump(text: str) -> list[ThreadStack]:
    """Threads from a ``faulthandler`` dump or ``py-spy dump`` output (both list the innermost call first)."""
    stacks: list[ThreadStack] = []
    current: Optional[ThreadStack] = None  # faulthandler's "Current thread": the one that took the signal
    for line in text.splitlines():
        m = _FH_THREAD.match(line)
        if m:
            stacks.append(ThreadStack((m.group(3) or "").strip(" []") or m.group(2)))
            if m.group(1) == "Current thread":
                current = stacks[-1]
            continue
        m = _SPY_THREAD.match(line)
        if m:
            stacks.append(ThreadStack(m.group(3) or m.group(1), main=m.group(3) == "MainThread"))
            continue
        m = _FH_FRAME.match(line) or _SPY_FRAME.match(line)
        if m and stacks:
            file, number, func = (m.group(1), m.group(2), m.group(3)) if m.re is _FH_FRAME else \
                (m.group(2), m.group(3), m.group(1))
            stacks[-1].frames.insert(0, Frame(file, int(number), func))
    if stacks and not any(s.main for s in stacks):
        (current or stacks[-1]).main = True  # faulthandler lists the main thread last
    stacks.sort(key=lambda s: not s.main)
    return stacks


def where(stack: ThreadStack) -> str:
    """``all_reduce (torch.distributed) at train.py:14 in step: dist.all_reduce(t)``, or the innermost user line."""
    if not stack.frames:
        return "no Python frames (in native code, or idle)"
    # the outermost frame there is the public call (all_reduce), not the helpers it calls
    collective: Optional[Frame] = next((f for f in stack.frames if f.file.endswith(_COLLECTIVES)), None)
    user: Optional[Frame] = next((f for f in reversed(stack.frames) if is_user_file(f.file)), None)
    innermost = stack.frames[-1]
    place = user or innermost
    text = f"{place.short()}: {place.text}" if place.text else place.short()
    if collective is not None:
        return f"{collective.func} (torch.distributed) at {text}"
    if user is not None and innermost is not user:
        module = os.path.splitext(os.path.basename(innermost.file))[0]
        return f"{text} (inside {module}.{innermost.func})"
    return text
