"""Run a script or module as ``__main__``, the way ``python script.py`` / ``python -m module`` would.

``tensor-dap run``, ``profile`` and ``run --listen`` all run the user's program unchanged
inside this process: same ``sys.argv``, ``__main__``, ``sys.path[0]``, working directory and
exit code. What happens on a crash is passed in, so this module stays below the debugger.
"""

from __future__ import annotations

import bdb
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from .errors import UsageError

OnCrash = Callable[[BaseException], int]


class ScriptNotFound(UsageError):
    """The script or module to run does not exist; reported as one line, exit code 2."""


@dataclass(frozen=True)
class Target:
    """What to run: a script path, or a module name (``-m``)."""

    path: Optional[str] = None
    module: Optional[str] = None

    @property
    def label(self) -> str:
        """A short name for output folders and messages: the script's stem or the module name."""
        if self.module:
            return self.module
        return os.path.splitext(os.path.basename(self.path or "script"))[0]


def script_target(path: Optional[str]) -> Target:
    """A script that must exist; its absolute path (what ``python script.py`` puts in ``sys.argv[0]``)."""
    if not path:
        raise ScriptNotFound("missing script (usage: tensor-dap run script.py [args ...] or -m module [args ...])")
    if not os.path.isfile(path):
        raise ScriptNotFound(f"no such script: {path}")
    return Target(path=os.path.abspath(path))


def module_target(name: str) -> Target:
    """A module importable from the current directory (checked without running it)."""
    import importlib.util

    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ScriptNotFound(f"no module named {name!r} ({exc})") from None
    finally:
        sys.path.pop(0)
    if spec is None:
        raise ScriptNotFound(f"no module named {name!r}")
    return Target(module=name)


def run(target: Target, argv: Sequence[str], on_crash: Optional[OnCrash] = None) -> int:
    """Run ``target`` as __main__ with ``argv``; return its exit code.

    An uncaught exception goes to ``on_crash`` (which returns the exit code), else it is
    printed as Python would and the code is 1.
    """
    saved_argv = sys.argv[:]
    folder = os.path.dirname(target.path) if target.path else os.getcwd()
    sys.argv = [target.path or target.module or "", *argv]
    sys.path.insert(0, folder)
    try:
        if target.module:  # alter_sys: sys.argv[0] becomes the module's file, as with python -m
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target.path or "", run_name="__main__")
        return 0
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130
    except bdb.BdbQuit:  # `q` at a breakpoint: the user ended the run, nothing crashed
        return 1
    except BaseException as exc:  # noqa: BLE001 - every crash of the program goes to on_crash
        if on_crash is not None:
            return on_crash(exc)
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)
        return 1
    finally:
        sys.argv = saved_argv
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)


def exit_code(exc: SystemExit) -> int:
    """The process exit code ``sys.exit(code)`` asks for (a message means 1, printed as Python does)."""
    code: Any = exc.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1

