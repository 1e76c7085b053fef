"""``tensor-dap demo [NAME ...]``: bugs planted on purpose, caught by the real tools, narrated.

``--list`` names the scenarios; with no name every scenario runs. The exit code is 0 only when
every planted bug was caught. Files go under ``DIR/.tensor_dap/`` (the current folder by default):
the incident bundle in ``incidents/``, the rest in ``demo/<time>/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all; see --list)")
    parser.add_argument("--list", action="store_true", help="name the scenarios and what each plants")
    parser.add_argument("--dir", default=".", help="where .tensor_dap/ is written (default: the current folder)")


def run(args: argparse.Namespace) -> int:
    from ..console import make_console
    from ..demo import tour

    console = make_console()
    if args.list:
        console.print(tour.listing())
        return 0
    chosen = tour.choose(args.names)
    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"--dir {args.dir}: no such folder")
    return tour.run(chosen, root, console)
