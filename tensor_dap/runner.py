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
# The program's code objects live as long as the process, as under python itself (whose __main__ outlives the
# script): torch's profiler names Python frames by pointers into their code objects and reads them after the
# run, and names of code freed by then came back as garbage (pytorch/pytorch#136040), losing the whole window.
# A module's code object holds every function compiled from its file (co_consts), so one per run is enough.
_KEPT_CODE: list[Any] = []


class ScriptNotFound(UsageError):
    """The script or module to run does not exist; reported as one line, exit code 2."""


@dataclass(frozen=True)
class Target:
    """What to run: a script path, or a module name (``-m``)."""

    path: Optional[str] = None
    module: Optional[str] = None
    argv0: Optional[str] = None  # the script as the user typed it: what python puts in sys.argv[0]

    @property
    def label(self) -> str:
        """A short name for output folders and messages: the script's stem or the module name."""
        if self.module:
            return self.module
        return os.path.splitext(os.path.basename(self.path or "script"))[0]


def script_target(path: Optional[str]) -> Target:
    """A script that must exist: run from its absolute path (``__file__``), shown as typed (``sys.argv[0]``)."""
    if not path:
        raise ScriptNotFound("missing script (usage: tensor-dap run script.py [args ...] or -m module [args ...])")
    if not os.path.isfile(path):
        raise ScriptNotFound(f"no such script: {path}")
    return Target(path=os.path.abspath(path), argv0=path)


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
    folders = list(spec.submodule_search_locations or ())
    if folders and not any(os.path.exists(os.path.join(d, "__main__.py")) or os.path.isdir(os.path.join(d, "__main__"))
                           for d in folders):  # looked for on disk: importing the package would run its code now
        raise ScriptNotFound(f"{name!r} is a package with no __main__ module, so it cannot be run with -m "
                             f"(run one of its modules: -m {name}.<module>)")
    return Target(module=name)


def run(target: Target, argv: Sequence[str], on_crash: Optional[OnCrash] = None, *,
        reraise_interrupt: bool = False) -> int:
    """Run ``target`` as __main__ with ``argv``; return its exit code.

    An uncaught exception goes to ``on_crash`` (which returns the exit code), else it is
    printed as Python would and the code is 1. Ctrl-C returns 130, or with
    ``reraise_interrupt`` propagates (see ``exit_like_python``).
    """
    saved_argv = sys.argv[:]
    folder = os.path.dirname(target.path) if target.path else os.getcwd()
    sys.argv = [target.argv0 or target.path or target.module or "", *argv]
    sys.path.insert(0, folder)
    try:
        if target.module:  # alter_sys: sys.argv[0] becomes the module's file, as with python -m
            _run_module(target.module)
        else:
            _run_script(target.path or "")
        return 0
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt as exc:
        if reraise_interrupt:
            raise exit_like_python(exc) from None
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


def _run_module(name: str) -> None:
    """``runpy.run_module(name, run_name="__main__", alter_sys=True)``, keeping the module's code object: runpy's
    own two steps (stable since Python 3.4), or run_module itself where they are gone."""
    details, run_code = getattr(runpy, "_get_module_details", None), getattr(runpy, "_run_module_code", None)
    if details is None or run_code is None:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return
    _, spec, code = details(name)
    _KEPT_CODE.append(code)
    run_code(code, None, "__main__", spec)


def _run_script(path: str) -> None:
    """Run a script file as ``__main__``: what runpy.run_path does, minus resetting ``sys.argv[0]`` to the path
    (python keeps it as typed while ``__file__`` is absolute). Zip applications still go to runpy."""
    import io
    import types
    import zipfile

    if zipfile.is_zipfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    _KEPT_CODE.append(code)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__=None, __spec__=None)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # pickling (multiprocessing spawn, DataLoader workers) finds the program here
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def exit_code(exc: SystemExit) -> int:
    """The process exit code ``sys.exit(code)`` asks for (a message means 1, printed as Python does)."""
    code: Any = exc.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1



def exit_like_python(exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """``exc``, marked to leave ``tensor-dap`` uncaught, so the process ends as ``python script.py`` does on Ctrl-C.

    An uncaught KeyboardInterrupt makes the interpreter run atexit handlers, join threads,
    then kill itself with SIGINT (a parent such as torchrun or a shell sees "killed by
    SIGINT", not exit code 130). The traceback shows the program's frames only.
    """
    exc.program_interrupted = True  # type: ignore[attr-defined]
    tb = exc.__traceback__
    while tb is not None and is_runner_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    user_tb = tb

    def hook(kind: type, value: BaseException, _tb: object) -> None:
        import traceback

        if value is exc:
            traceback.print_exception(kind, value, user_tb)
        else:
            sys.__excepthook__(kind, value, _tb)  # type: ignore[arg-type]

    sys.excepthook = hook
    return exc


def is_runner_frame(filename: str) -> bool:
    """Frames of the runner itself and of ``runpy`` (hidden from the program's traceback, as python hides them)."""
    return filename in (__file__, runpy.__file__) or filename.endswith(("<frozen runpy>",))
