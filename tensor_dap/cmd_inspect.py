"""``tensor-dap inspect FILE``: summaries of every tensor in a checkpoint, without unpickling code."""

from __future__ import annotations

import argparse
from typing import Any, Iterator, Tuple


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a file written by torch.save (state dict, tensor, or nested containers)")
    parser.add_argument("--nonfinite", action="store_true", help="list only tensors holding NaN/Inf")


def walk(obj: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """(dotted name, tensor) for every tensor inside nested dicts/lists/tuples."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "<tensor>", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from walk(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from walk(value, f"{prefix}[{i}]")


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from .cli import UsageError
    from .console import make_console
    from .render_rich import summaries_table
    from .summary import describe

    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file}")
    import torch

    try:
        obj = torch.load(args.file, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"tensor-dap: error: cannot load {args.file} as a torch checkpoint: {first}", file=sys.stderr)
        return 1
    rows = [(name, describe(t)) for name, t in walk(obj)]
    if args.nonfinite:
        rows = [(n, s) for n, s in rows if s.nonfinite]
    make_console().print(summaries_table(rows, title=f"{args.file}: {len(rows)} tensors"))
    return 1 if args.nonfinite and rows else 0
