"""``tensor-dap run script.py [args...]``: run a script with tensor-aware breakpoints and crash reports.

The script runs in this process as ``__main__`` (like ``python script.py``): ``breakpoint()``
opens tensor_dap's debugger, and an uncaught exception becomes the crash report, then the
post-mortem debugger (or exit code 1 off a terminal). The steps are separate functions so
remote debugging (listen / attach) can slot in before the script starts.
"""

from __future__ import annotations

import argparse

from .. import runner


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def route_breakpoints() -> None:
    """breakpoint() -> tensor_dap's debugger, here and in child processes (DataLoader workers)."""
    from ..debug.install import install

    install(post_mortem=False)


def _crash(exc: BaseException) -> int:
    from ..debug.crash import handle

    return handle(exc, exc.__traceback__)


def run(args: argparse.Namespace) -> int:
    target = runner.script_target(args.script)
    route_breakpoints()
    return runner.run(target, list(args.args), on_crash=_crash)
