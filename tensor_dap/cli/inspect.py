"""``tensor-dap inspect FILE``: summaries of every tensor in a checkpoint, without unpickling code."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a file written by torch.save (state dict, tensor, or nested containers)")
    parser.add_argument("--nonfinite", action="store_true", help="list only tensors holding NaN/Inf")


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from ..console import make_console
    from ..errors import UsageError
    from ..format import first_line
    from ..nested import walk
    from ..summary import describe
    from ..summary.tables import summaries_table

    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file}")
    import torch

    try:
        obj = torch.load(args.file, map_location="cpu", weights_only=True)
    except Exception as exc:
        print(f"tensor-dap: error: cannot load {args.file} as a torch checkpoint: {first_line(exc)}", file=sys.stderr)
        return 1
    rows = [(name or "<tensor>", describe(t)) for name, t in walk(obj, dotted=True)]
    if args.nonfinite:
        rows = [(n, s) for n, s in rows if s.nonfinite]
    make_console().print(summaries_table(rows, title=f"{args.file}: {len(rows)} tensors"))
    return 1 if args.nonfinite and rows else 0
