"""``tensor-dap tensorboard [LOGDIR]``: TensorBoard for a log folder, on 127.0.0.1 unless told otherwise.

TensorBoard serves the training curves of everyone who can reach the port, so it binds the
loopback address; ``--host`` opens it to another interface only when the user names one.
The server runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..errors import UsageError

DEFAULT_LOGDIR = "runs"
LOOPBACK = "127.0.0.1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", nargs="?", default=DEFAULT_LOGDIR,
                        help=f"the folder tensor_dap.Monitor (any SummaryWriter) writes to (default {DEFAULT_LOGDIR})")
    parser.add_argument("--port", type=int, default=6006, help="port to serve on (default 6006; 0 picks a free one)")
    parser.add_argument("--host", default=LOOPBACK,
                        help="address to bind (default 127.0.0.1, this machine only; 0.0.0.0 opens it to the network)")


def _has_events(logdir: str) -> bool:
    for _, _, files in os.walk(logdir):
        if any(".tfevents." in f for f in files):
            return True
    return False


def run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.logdir):
        raise UsageError(f"no such log folder: {args.logdir} (write one with tensor_dap.Monitor(logdir=...))")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    try:
        from tensorboard import program
    except ImportError:
        print("tensor-dap: error: tensorboard is not installed (pip install tensorboard)", file=sys.stderr)
        return 1
    from ..console import make_console
    from ..format import printable

    console = make_console(stderr=True)
    if not _has_events(args.logdir):
        console.print(f"note: {printable(args.logdir)} holds no event files yet; TensorBoard shows them as they appear")
    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", args.logdir, "--host", args.host, "--port", str(args.port)])
    try:
        url = board.launch()
    except program.TensorBoardServerException as exc:
        hint = " (choose another with --port, or --port 0 for a free one)" if "in use" in str(exc) else ""
        raise UsageError(f"{exc}{hint}") from None
    if args.host not in (LOOPBACK, "localhost", "::1"):
        console.print(f"warning: TensorBoard is reachable from other machines on {printable(args.host)}")
    print(f"TensorBoard for {printable(args.logdir)} at {url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
