"""``tensor-dap``: the one command-line entry point.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires them up and turns user mistakes into a
one-line error with exit code 2 instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, Optional

from ..errors import UsageError

# subcommand -> (module, one-line help). Modules must import lightly (no torch at import).
COMMANDS = {
    "demo": ("tensor_dap.cli.demo", "the tour: a training run with bugs planted on purpose, each caught by the real "
                                     "tool (--list names them)"),
    "init-vscode": ("tensor_dap.cli.init_vscode", "add tensor_dap's debug configurations to .vscode/launch.json"),
    "stacks": ("tensor_dap.cli.stacks", "print every thread's stack of a running process (hung ranks)"),
    "inspect": ("tensor_dap.cli.inspect", "summarize every tensor in a saved .pt/.pth file"),
    "run": ("tensor_dap.cli.run", "run a script with tensor-aware breakpoints and crash reports"),
    "replay": ("tensor_dap.cli.replay", "print the report of an incident bundle"),
    "profile": ("tensor_dap.cli.profile", "run a script under a profiler (cpu, line, torch, memory), save the files"),
    "tensorboard": ("tensor_dap.cli.tensorboard", "start TensorBoard on 127.0.0.1 for a log folder"),
    "doctor": ("tensor_dap.cli.doctor", "the environment report (torch, GPUs, debugpy plugin); exit 1 if broken"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage; one clear line is enough
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    from ..version import __version__

    parser = _Parser(prog="tensor-dap", description="Tensor-aware debugging for PyTorch.")
    parser.add_argument("--version", action="version", version=f"tensor-dap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "command", None):
            raise UsageError("missing COMMAND (see 'tensor-dap --help')")
        code = int(importlib.import_module(args._module).run(args) or 0)
        sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is caught below
        return code
    except UsageError as exc:
        print(f"tensor-dap: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if getattr(exc, "program_interrupted", False):  # the program's own Ctrl-C: end as python would
            raise
        return 130
    except BrokenPipeError:  # `tensor-dap doctor --json | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 1
