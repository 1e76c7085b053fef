"""``tensor-dap run [options] script.py [args...]`` or ``... -m package.module [args...]``.

The program runs in this process as ``__main__``, unchanged: same ``sys.argv``, working
directory, exit code and signals (Ctrl-C ends it as it ends ``python script.py``).
``breakpoint()`` opens tensor_dap's debugger, a crash becomes the crash report and the
post-mortem debugger. Options go before the program; everything after it is the program's.
Every option is checked before anything runs, so a mistake costs one line and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Optional

from .. import runner
from ..console import note
from ..errors import STOPS, UsageError
from ..format import short_error

_TORCHRUN = ("torch.distributed.run", "torch.distributed.launch", "torchrun")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    remote = parser.add_argument_group("debug from VS Code (debugpy)")
    remote.add_argument("--listen", metavar="[HOST:]PORT",
                        help="start debugpy on PORT (127.0.0.1 unless HOST is given; 0 picks a free port); "
                             "under torchrun each rank listens on PORT + LOCAL_RANK")
    remote.add_argument("--wait", action="store_true", help="wait for the debugger to attach before running")
    remote.add_argument("--allow-remote", action="store_true",
                        help="allow a non-loopback HOST (debugpy has no authentication: prefer an SSH tunnel)")
    remote.add_argument("--ranks", metavar="all|0,2", default="all",
                        help="which torchrun ranks listen (and may stop on a trigger); default all")
    remote.add_argument("--subprocesses", action="store_true",
                        help="also debug child processes such as DataLoader workers (off: it stalls DDP start-up)")
    triggers = parser.add_argument_group("training triggers, without changing the program")
    triggers.add_argument("--break-on-nan", action="store_true",
                          help="watch the model of each optimizer (with none, the model a loop updates by "
                               "hand): stop where a NaN/Inf is born")
    triggers.add_argument("--loss-above", type=float, metavar="X",
                          help="stop before the update of a step whose loss exceeds X (the losses .backward() "
                               "got since the last update, added up: accumulated micro-batches make the step's)")
    triggers.add_argument("--guard", action="store_true",
                          help="the triggers with no false alarms: today --break-on-nan")
    triggers.add_argument("--replay", metavar="BUNDLE",
                          help="re-run an incident bundle's failing step on the model and optimizer the program "
                               "builds, stop where the NaN was born, then end (what VS Code's Replay button runs)")
    triggers.add_argument("--trust", action="store_true",
                          help="with --replay: unpickle the Python objects a bundle keeps (objects.pt: a batch of "
                               "the program's own class), which runs code: only for bundles you wrote")
    triggers.add_argument("--hang-after", type=float, metavar="SECONDS",
                          help="when no optimizer step (by hand: no .backward()) completes for SECONDS, write "
                               "every rank's stacks to .tensor_dap/incidents/<time>-hang/ and say where each rank "
                               "waits")
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="module [args]",
                        help="run a library module as a script, as python -m does")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args]",
                        help="the script and its arguments")


def route_breakpoints() -> None:
    """breakpoint() -> tensor_dap's debugger, here and in child processes (DataLoader workers)."""
    from ..debug.install import install

    install(post_mortem=False)


def _crash(exc: BaseException) -> int:
    from ..debug.crash import handle

    _explain_with_watches(exc)
    return handle(exc, exc.__traceback__)


def _explain_with_watches(exc: BaseException) -> None:
    """Before the crash report: an open watch names where a non-finite value that this step made was born.
    Not after a trigger's own stop (its error, or quitting its debugger): that was reported, and another
    watch (a GAN's other model, whose graph the loss also went through) would report it a second time."""
    if "tensor_dap.triggers.active" not in sys.modules or isinstance(exc, STOPS):
        return  # no watch was ever made; or a trigger stopped the run
    from ..triggers import active

    for w in active.watches():
        try:
            w.explain_crash(exc.__traceback__, exc)
        except Exception as error:  # noqa: BLE001 - the crash report comes first
            print(f"tensor_dap: {short_error(error, limit=None)}", file=sys.stderr)


def target_of(args: argparse.Namespace) -> tuple[runner.Target, list[str]]:
    """The program to run and its arguments; torchrun itself is refused with the order that works."""
    program = list(args.program or [])
    if program[:1] == ["--"]:
        program = program[1:]
    if args.module is not None:
        if not args.module:
            raise UsageError("-m needs a module name (tensor-dap run -m package.module [args ...])")
        name, rest = args.module[0], args.module[1:]
        if name in _TORCHRUN:
            raise _inside_torchrun()
        return runner.module_target(name), rest
    if program and os.path.basename(program[0]) in _TORCHRUN:
        raise _inside_torchrun()
    return runner.script_target(program[0] if program else None), program[1:]


def _inside_torchrun() -> UsageError:
    return UsageError("put tensor-dap inside torchrun, so that each rank runs it: "
                      "torchrun --nproc-per-node N -m tensor_dap run [options] train.py [args]")


def check_options(args: argparse.Namespace) -> Optional[str]:
    """Validate every option before the program starts, and before anything is printed: a mistake is the only
    line a bad invocation prints. Returns a warning to print, if any."""
    if args.listen is None:
        given = [flag for flag, on in (("--wait", args.wait), ("--allow-remote", args.allow_remote),
                                       ("--subprocesses", args.subprocesses), ("--ranks", args.ranks != "all"))
                 if on]
        if given:
            raise UsageError(f"{', '.join(given)} only make{'s' if len(given) == 1 else ''} sense with --listen")
    if args.loss_above is not None and not math.isfinite(args.loss_above):
        raise UsageError(f"--loss-above {args.loss_above}: expected a finite number")
    if args.trust and args.replay is None:
        raise UsageError("--trust only makes sense with --replay")
    if args.replay is not None and not os.path.isfile(os.path.join(args.replay, "report.json")):
        raise UsageError(f"--replay {args.replay}: not an incident bundle (no report.json in it)")
    if args.hang_after is not None and not (math.isfinite(args.hang_after) and args.hang_after > 0):
        raise UsageError(f"--hang-after {args.hang_after:g}: expected a positive number of seconds")
    if args.break_on_nan or args.guard or args.loss_above is not None or args.replay is not None:
        try:
            from ..triggers import auto  # noqa: F401 - here, so that a missing torch is the only line printed
        except ImportError as exc:
            raise UsageError(f"the triggers need torch ({exc})") from None
    if args.listen is None:
        return None
    from ..dap import listen
    from ..dist import launch_rank

    address, ranks, rank = listen.parse_address(args.listen), listen.parse_ranks(args.ranks), launch_rank()
    warning = listen.check_host(address.host, args.allow_remote, port=address.port)
    if listen.selected(ranks, rank):
        listen.check_bindable(address.host, listen.port_for(address, rank))
    return warning


def start_listening(args: argparse.Namespace) -> Optional[frozenset]:
    """debugpy for this rank if it is chosen; returns the ranks that listen, which are those a trigger may stop."""
    from ..dap import listen
    from ..dist import launch_rank

    address, ranks, rank = listen.parse_address(args.listen), listen.parse_ranks(args.ranks), launch_rank()
    if ranks is None:
        ranks = frozenset(range(rank.world_size))  # every rank has a debugger to stop in
    if not listen.selected(ranks, rank):
        return ranks
    host, port = listen.start(address, rank, subprocesses=args.subprocesses)
    note("\n".join(listen.instructions(host, port, rank, ranks, waiting=args.wait, base=address.port)), style="")
    if args.wait:
        listen.wait_for_client()
        note(f"tensor_dap: debugger attached on port {port}; running the program", style="")
    return ranks


def start_helpers(args: argparse.Namespace, ranks: Optional[frozenset]) -> list[Any]:
    """Stacks on SIGUSR1, the triggers and the hang watchdog; what must be closed at the end."""
    from ..debug.on_demand import install as stacks_on_signal
    from ..dist import launch_rank

    rank = launch_rank()
    stacks_on_signal(rank.rank if rank.distributed else None)
    opened: list[Any] = []
    nan = args.break_on_nan or args.guard
    if nan or args.loss_above is not None or args.replay is not None:
        from ..triggers.auto import AutoTriggers  # check_options made sure it imports
        from ..triggers.warned import BeforeTraining

        opened.append(BeforeTraining())  # a report of a non-finite batch names the data's warnings (numpy's 0/0)
        opened.append(AutoTriggers(nan=nan, loss_above=args.loss_above, ranks=ranks, replay=args.replay,
                                   trusted=args.trust))
    if args.hang_after is not None or rank.distributed:
        from ..triggers.hang import watchdog

        opened.append(watchdog(args.hang_after, rank=rank))
    return opened


def run(args: argparse.Namespace) -> int:
    target, program_args = target_of(args)
    warning = check_options(args)
    if warning:
        note(f"tensor_dap: {warning}")
    route_breakpoints()
    ranks = start_listening(args) if args.listen is not None else None
    opened = start_helpers(args, ranks)
    try:
        return runner.run(target, program_args, on_crash=_crash, reraise_interrupt=True)
    finally:
        for helper in reversed(opened):
            try:
                helper.close()
            except Exception as exc:  # noqa: BLE001 - the program's exit code matters more
                print(f"tensor_dap: {short_error(exc, limit=None)}", file=sys.stderr)
