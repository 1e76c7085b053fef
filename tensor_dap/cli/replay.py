"""``tensor-dap replay BUNDLE``: print the report stored in an incident bundle.

Reading the report needs no torch and no unpickling (it is report.json); re-running the
step needs the user's model and step function, so that is ``tensor_dap.replay`` in Python.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="an incident folder, e.g. .tensor_dap/incidents/20260101-120000-step42")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from ..console import make_console
    from ..errors import UsageError
    from ..triggers.incident import BundleError, read_report
    from ..triggers.report import to_json, to_rich

    try:
        report = read_report(args.bundle)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    console = make_console()
    if args.json:
        console.out(to_json(report), highlight=False)
    else:
        console.print(to_rich(report))
    return 0
