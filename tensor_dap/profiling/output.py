"""The files a profile run writes, and where: one new folder per run, never an earlier one overwritten.

The names are a contract with the VS Code extension and with tools reading ``profile.json``;
docs/profiling.md documents each format.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..folders import PROFILES

DEFAULT_PARENT = PROFILES
CPROFILE = "cprofile.prof"
LINE = "line.lprof"
TRACE = "torch.trace.json"
TRACE_GZ = "torch.trace.json.gz"
MEMORY = "memory.json"
CUDA_SNAPSHOT = "cuda_snapshot.pickle"
MANIFEST = "profile.json"

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def run_folder(parent: Optional[str], label: str, now: Optional[float] = None) -> Path:
    """A new folder ``<parent>/<YYYYmmdd-HHMMSS>-<label>`` (``-2``, ``-3``… when taken); UsageError if unwritable."""
    base = Path(parent or DEFAULT_PARENT)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    name = f"{stamp}-{_UNSAFE_NAME.sub('_', label).strip('._') or 'program'}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            folder = base / (name if n == 1 else f"{name}-{n}")
            try:
                folder.mkdir()
                return folder
            except FileExistsError:
                continue
    except OSError as exc:
        raise UsageError(f"cannot write profiles to {base}: {exc.strerror or exc}") from None
    raise UsageError(f"cannot write profiles to {base}: too many runs named {name}")


def write_json(path: Path, data: Any) -> None:
    """Write through a temporary file, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    os.replace(tmp, path)


def write_manifest(folder: Path, *, mode: str, program: str, argv: list[str], started: float, duration: float,
                   exit_code: int, files: list[str], notes: list[str]) -> Path:
    """``profile.json``: what ran, how, and which files it left, so tools find the outputs."""
    path = folder / MANIFEST
    write_json(path, {
        "version": 1, "kind": "tensor_dap.profiling", "mode": mode, "program": program, "argv": argv,
        "cwd": os.getcwd(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(duration, 6), "exit_code": exit_code, "files": files, "notes": notes,
    })
    return path
