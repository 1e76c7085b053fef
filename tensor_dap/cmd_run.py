"""``tensor-dap run script.py [args...]``: run a script with tensor-aware breakpoints and crash reports.

The script runs in this process as ``__main__`` (like ``python script.py``): ``breakpoint()``
opens tensor_dap's debugger, and an uncaught exception becomes the crash report, then the
post-mortem debugger (or exit code 1 off a terminal). The steps are separate functions so
remote debugging (listen / attach) can slot in before the script starts.
"""

from __future__ import annotations

import argparse
import os
import sys

from .cli import UsageError


class ScriptNotFound(UsageError):
    """The script to run is missing or does not exist; cli reports it as one line, exit code 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def check_script(path: str | None) -> str:
    if not path:
        raise ScriptNotFound("missing script (usage: tensor-dap run script.py [args ...])")
    if not os.path.isfile(path):
        raise ScriptNotFound(f"no such script: {path}")
    return os.path.abspath(path)


def route_breakpoints() -> None:
    """breakpoint() -> tensor_dap's debugger, here and in child processes (DataLoader workers)."""
    from .debugger import install

    install(post_mortem=False)


def execute(script: str, argv: list[str]) -> int:
    """Run ``script`` as __main__ with ``argv``; return its exit code, crash-reporting an exception."""
    import bdb
    import runpy

    saved_argv = sys.argv[:]
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except bdb.BdbQuit:  # `q` at a breakpoint: the user ended the run, nothing crashed
        return 1
    except BaseException as exc:  # noqa: BLE001 - every crash of the script gets the report
        from .crash import handle

        return handle(exc, exc.__traceback__)
    finally:
        sys.argv = saved_argv
        if sys.path and sys.path[0] == os.path.dirname(script):
            sys.path.pop(0)


def run(args: argparse.Namespace) -> int:
    script = check_script(args.script)
    route_breakpoints()
    return execute(script, list(args.args))
