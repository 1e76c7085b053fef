"""``tensor-dap stacks [PID ...]``: every thread's Python stack of a running process, now, and where it waits.

A process started by ``tensor-dap run`` answers SIGUSR1 with a faulthandler dump, even when
stuck in a collective or native code; without a PID, every such process of yours is asked
(all ranks of a torchrun job at once). Any other process is read with ``py-spy dump`` when
py-spy is installed and allowed to read it. Exit codes: 2 for a usage mistake (no such
process), 1 when a process could not be read, 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import Optional

from ..errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pids", nargs="*", type=int, metavar="PID",
                        help="processes to read (default: every process tensor-dap run started for you)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for each process (default 10)")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run(args: argparse.Namespace) -> int:
    from ..debug import on_demand

    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    if on_demand.SIGNAL is None and not shutil.which("py-spy"):
        raise UsageError("tensor-dap stacks needs SIGUSR1 (Linux, macOS) or py-spy")
    for pid in args.pids:
        if pid <= 0 or not _exists(pid):
            raise UsageError(f"no process with pid {pid}")
    pids = args.pids or [r.pid for r in on_demand.all_registered()]
    if not pids:
        print("tensor-dap: error: no process started by tensor-dap run is running; give a PID "
              "(read with py-spy when installed)", file=sys.stderr)
        return 1
    failed = 0
    summary = []
    for pid in pids:
        text, label, error = _read(pid, args.timeout)
        if text is None:
            failed += 1
            print(f"tensor-dap: error: {error}", file=sys.stderr)
            continue
        summary.append(_show(pid, label, text))
    if len(summary) > 1:
        _print(["where each process is:", *("  " + line for line in summary)])
    return 1 if failed else 0


def _read(pid: int, timeout: float) -> tuple[Optional[str], str, str]:
    """(dump text, a label, why it failed): the registered signal handler first, then py-spy."""
    from ..debug import on_demand

    reg = on_demand.registered(pid)
    label = f"pid {pid}" + (f" rank {reg.rank}" if reg is not None and reg.rank is not None else "")
    why = f"process {pid} was not started by tensor-dap run"
    if reg is not None:
        text = on_demand.request(reg, timeout)
        if text:
            return text, label, ""
        why = f"process {pid} did not answer SIGUSR1 within {timeout:g} s (did the program install its own handler?)"
    spy = shutil.which("py-spy")
    if spy is None:
        return None, label, f"{why}, and py-spy is not installed (pip install py-spy)"
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, label, f"{why}, and py-spy did not finish within {timeout:g} s"
    if done.returncode != 0:
        first = next((ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()), "no output")
        return None, label, (f"{why}, and py-spy could not read it: {first} (py-spy needs the same user and ptrace "
                             "permission, or root)")
    return done.stdout, label + " (py-spy)", ""


def _show(pid: int, label: str, text: str) -> str:
    """Print one process's dump under a header saying where its main thread is; returns that header."""
    from ..format import printable
    from ..probe.stacks import parse_dump, where

    threads = parse_dump(text)
    main = next((t for t in threads if t.main), threads[0] if threads else None)
    line = f"{label}: {printable(where(main)) if main else 'no Python stack in the dump'}"
    _print([line, printable(text.rstrip(), newlines=True), ""])
    return line


def _print(lines: list[str]) -> None:
    from rich.text import Text

    from ..console import make_console

    console = make_console()
    for line in lines:
        console.print(Text(line), soft_wrap=True)
