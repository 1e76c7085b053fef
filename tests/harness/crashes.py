"""What the crash-report tests share: the explanation of what a function raises, and a script run through the real
``tensor-dap run`` with no terminal (the report, then exit 1)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Callable

from tensor_dap.probe.shape_errors import explain


def explained(fn: Callable[[], Any]) -> Any:
    """The shape-error explanation of what ``fn()`` raises (None when it is no family of ours)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the point is to catch what the user's code raises
        return explain(exc)
    raise AssertionError("no exception")


def run_script(path: Any) -> subprocess.CompletedProcess:
    """``tensor-dap run path`` with stdin not a terminal: it prints its report and exits 1, never waits."""
    return subprocess.run([sys.executable, "-m", "tensor_dap", "run", str(path)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, check=False)
