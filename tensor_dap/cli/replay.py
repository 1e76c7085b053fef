"""``tensor-dap replay BUNDLE``: print the report stored in an incident bundle.

Reading the report needs no torch and no unpickling (it is report.json); re-running the
step needs the user's model (and step function), so that is ``tensor_dap.replay`` in Python.
A bundle may come from anywhere: every string it holds is shown escaped, never obeyed by the
terminal or parsed as markup. Exit codes: 0 shown, 2 not a bundle folder (a usage mistake),
1 a bundle whose report.json is damaged or not one of ours (the file is the problem).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="an incident folder, e.g. .tensor_dap/incidents/20260101-120000-step42")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from ..console import make_console
    from ..errors import UsageError
    from ..format import printable
    from ..triggers.incident import BundleError, read_report
    from ..triggers.report import to_json, to_rich

    try:
        report = read_report(args.bundle)
    except BundleError as exc:
        if not exc.file_problem:
            raise UsageError(printable(str(exc))) from None
        print(f"tensor-dap: error: {printable(str(exc))}", file=sys.stderr)
        return 1
    console = make_console()
    if args.json:
        console.out(to_json(report), highlight=False)
    else:
        console.print(to_rich(report))
    return 0
