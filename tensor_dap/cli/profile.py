"""``tensor-dap profile --mode MODE [--out DIR] script.py [args...]`` (or ``-m module``).

Runs the program unchanged under one profiler, writes its files to a new folder under
``.tensor_dap/profiles/`` (or ``--out``), then prints a short summary and the path of each
file on stderr (the program's own stdout stays its own). The exit code is the program's.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from .. import runner
from ..errors import UsageError
from ..profiling.session import MODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", required=True, choices=MODES,
                        help="cpu: cProfile; line: line_profiler; torch: torch.profiler trace; memory: allocations")
    parser.add_argument("--out", metavar="DIR", help="parent folder of the run folders (default .tensor_dap/profiles)")
    parser.add_argument("--function", action="append", default=[], metavar="[MODULE:]NAME",
                        help="--mode line: a function to profile (repeatable): train_step, mypkg.model:Net.forward")
    parser.add_argument("--wait", type=int, default=1, help="--mode torch/memory: steps skipped before warm-up (1)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="--mode torch/memory: warm-up steps, not kept (1; at least 1)")
    parser.add_argument("--active", type=int, default=3, help="--mode torch/memory: steps recorded (3)")
    parser.add_argument("--top", type=int, default=15, help="rows in each summary table (15)")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")


def _target(args: argparse.Namespace) -> tuple[runner.Target, list[str]]:
    if args.module:
        rest = ([args.script] if args.script else []) + list(args.args)
        return runner.module_target(args.module), rest
    return runner.script_target(args.script), list(args.args)


@contextlib.contextmanager
def _backward_marks(mode: str) -> Iterator[None]:
    """A step window needs steps: a loop updating its parameters by hand makes no optimizer step, and recorded
    whole it filled memory (pytorch/examples' word_language_model: 20 GB in three minutes). Each ``backward()``
    on a loss (triggers' tap: the one wrapper of it) is passed on as the weakest step mark."""
    if mode not in ("torch", "memory"):
        yield
        return
    from ..profiling import marks
    from ..triggers import loss_tap

    stop = loss_tap.listen(lambda _loss: marks.backward_returned(), done=True)
    try:
        yield
    finally:
        stop()


def run(args: argparse.Namespace) -> int:
    from ..console import make_console
    from ..profiling.session import Options, prepare, profile_program
    from ..profiling.tables import plain

    for name in ("wait", "warmup", "active", "top"):
        if getattr(args, name) < (0 if name == "wait" else 1):
            raise UsageError(f"--{name} must be {'0 or more' if name == 'wait' else 'at least 1'}"
                             + (" (torch's profiler needs a warm-up step)" if name == "warmup" else ""))
    if args.function and args.mode != "line":
        raise UsageError("--function is for --mode line")
    target, argv = _target(args)
    options = Options(functions=list(args.function), wait=args.wait, warmup=args.warmup, active=args.active,
                      top=args.top)
    recorder = prepare(args.mode, target, options, args.out)
    with _backward_marks(args.mode):
        result = profile_program(recorder, argv)
    console = make_console(stderr=True)
    for renderable in result.renderables:
        console.print(renderable)
        console.print()
    for note in result.notes:
        console.print(plain(f"note: {note}"))
    console.print(plain(f"profile written to {result.folder}"))
    for name in result.files:
        console.print(plain(f"  {result.folder / name}"))
    if result.error:
        console.print(plain(f"tensor-dap: error: {result.error}"))
    return result.exit_code
