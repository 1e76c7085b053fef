"""Stacks on demand: ``tensor-dap run`` makes its process dump every thread's stack on SIGUSR1.

``faulthandler`` writes the dump from the signal handler itself, in C, without waiting for
the GIL: a process stuck in a collective or in native code still answers. The process
registers itself in a per-user folder (``<tmp>/tensor_dap-<uid>/``: ``<pid>.json`` says where
its dumps go) so ``tensor-dap stacks PID`` knows it may signal it; a program that installs
its own SIGUSR1 handler replaces ours, and the registration says nothing then.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Optional

SIGNAL = getattr(signal, "SIGUSR1", None)
_open: list[IO[str]] = []  # the dump file stays open for the life of the process (faulthandler writes to its fd)


def runtime_dir() -> str:
    """``<tmp>/tensor_dap-<uid>``, private to this user (refused if someone else owns it)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"tensor_dap-{uid}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if hasattr(os, "getuid") and (st.st_uid != uid or not os.path.isdir(path) or os.path.islink(path)):
        raise PermissionError(f"{path} is not a folder owned by you")
    return path


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (Linux), telling a reused pid from the registered one."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass(frozen=True)
class Registered:
    pid: int
    dump: str
    rank: Optional[int]


def install(rank: Optional[int] = None) -> Optional[str]:
    """Dump every thread's stack to this process's file on SIGUSR1; returns the file (None where it cannot)."""
    if SIGNAL is None or signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
        return None  # no SIGUSR1 here (Windows), or the program's environment already handles it
    try:
        folder = runtime_dir()
        pid = os.getpid()
        dump = os.path.join(folder, f"{pid}.stacks")
        f = open(dump, "w")  # noqa: SIM115 - kept open: faulthandler writes to it from the signal handler
        faulthandler.register(SIGNAL, file=f, all_threads=True, chain=False)
        _open.append(f)
        with open(os.path.join(folder, f"{pid}.json"), "w") as meta:
            json.dump({"pid": pid, "dump": dump, "rank": rank, "start": _start_time(pid)}, meta)
    except (OSError, RuntimeError, ValueError):
        return None
    import atexit

    atexit.register(_unregister, folder, pid)
    return dump


def _unregister(folder: str, pid: int) -> None:
    for name in (f"{pid}.json", f"{pid}.stacks"):
        try:
            os.remove(os.path.join(folder, name))
        except OSError:
            pass


def registered(pid: int) -> Optional[Registered]:
    """The registration of live process ``pid`` made by ``install``; None if it has none (or the pid was reused)."""
    try:
        with open(os.path.join(runtime_dir(), f"{pid}.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError, PermissionError):
        return None
    if meta.get("start") is not None and meta["start"] != _start_time(pid):
        return None
    return Registered(pid, str(meta["dump"]), meta.get("rank"))


def all_registered() -> list[Registered]:
    """Every live process of this user that ``tensor-dap run`` started, by pid."""
    try:
        names = os.listdir(runtime_dir())
    except OSError:
        return []
    pids = sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())
    found = []
    for pid in pids:
        reg = registered(pid) if _alive(pid) else None
        if reg is None:  # the process died without its atexit (SIGKILL, SIGTERM): forget it
            _unregister(runtime_dir(), pid)
        else:
            found.append(reg)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def request(reg: Registered, timeout: float = 5.0) -> Optional[str]:
    """Signal the process and return the dump it writes (None if nothing came within ``timeout``)."""
    try:
        start = os.path.getsize(reg.dump)
    except OSError:
        return None
    assert SIGNAL is not None
    os.kill(reg.pid, SIGNAL)
    deadline = time.monotonic() + timeout
    size, stable_since = start, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            now = os.path.getsize(reg.dump)
        except OSError:
            return None
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > start and time.monotonic() - stable_since > 0.2:
            break  # written, and nothing more for a moment: the dump is complete
    if size <= start:
        return None
    with open(reg.dump, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")
