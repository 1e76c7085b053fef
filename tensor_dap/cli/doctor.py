"""``tensor-dap doctor``: the environment report for bug reports; exit 1 when something tensor_dap needs is broken."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON (schema: tensor_dap.checks.schema.DOCTOR_SCHEMA)")


def run(args: argparse.Namespace) -> int:
    import json

    from ..checks.doctor import doctor
    from ..checks.result import PROBLEM
    from ..console import make_console

    report = doctor(init_cuda=True)  # this process ends right after: initializing CUDA costs nobody
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        make_console().print(report)
    return 1 if report.verdict == PROBLEM else 0
