"""``tensor-dap init-vscode [FOLDER]``: add tensor_dap's debug configurations to FOLDER/.vscode/launch.json.

An existing launch.json keeps everything it had (comments, formatting, trailing commas, your
configurations; a template whose name is already there is left alone), and a backup is
written next to it before the change. ``--dry-run`` prints the result instead of writing.
Exit codes: 2 for a usage mistake, 1 when the file cannot be read, parsed or written
(nothing is changed then), 0 otherwise.
"""

from __future__ import annotations

import argparse
import ntpath
import os
import shutil
import sys
import tempfile
from typing import Optional

from ..errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", nargs="?", default=".", help="the project folder (default: the current one)")
    parser.add_argument("--remote-host", metavar="HOST", help="the GPU box (for the SSH tunnel command printed)")
    parser.add_argument("--remote-root", metavar="/abs/path",
                        help="the project's absolute path on the GPU box (the attach configuration's remoteRoot)")
    parser.add_argument("--port", type=int, default=None, metavar="N",
                        help="the port the attach configuration connects to (default 5678)")
    parser.add_argument("--dry-run", action="store_true", help="print the resulting launch.json, write nothing")


def _check(args: argparse.Namespace) -> None:
    if not os.path.isdir(args.folder):
        raise UsageError(f"no such folder: {args.folder}")
    if args.remote_root is not None and not (args.remote_root.startswith("/") or ntpath.isabs(args.remote_root)):
        raise UsageError(f"--remote-root {args.remote_root}: expected an absolute path on the GPU box, "
                         "e.g. /home/me/project")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected a port from 1 to 65535")
    if args.remote_host is not None and (not args.remote_host.strip() or any(c.isspace() for c in args.remote_host)):
        raise UsageError(f"--remote-host {args.remote_host!r}: expected a host name such as gpu-box or me@gpu-box")


class _Failed(Exception):
    """The file could not be read, merged or written; nothing was changed."""


def run(args: argparse.Namespace) -> int:
    _check(args)
    try:
        return _init(args)
    except _Failed as exc:
        print(f"tensor-dap: error: {exc}", file=sys.stderr)
        return 1


def _init(args: argparse.Namespace) -> int:
    from ..dap import launch
    from ..dap.listen import DEFAULT_PORT
    from ..format import printable

    path = os.path.join(args.folder, ".vscode", "launch.json")
    existing = _read(path)
    try:
        result = launch.merge(existing, launch.templates(port=args.port, remote_root=args.remote_root))
    except launch.LaunchJsonError as exc:
        raise _Failed(f"{path}: {exc}") from None
    kept = f" (kept your own {', '.join(repr(k) for k in result.kept)})" if result.kept else ""
    if args.dry_run:
        sys.stdout.write(printable(result.text, newlines=True))
        print(f"tensor-dap: dry run, nothing written; would add {len(result.added)} configuration(s) to {path}{kept}",
              file=sys.stderr)
        return 0
    if not result.changed:
        print(f"{path} already has tensor_dap's configurations; nothing to do{kept}")
        return 0
    backup = _write(path, result.text, existing)
    print(f"added {', '.join(repr(n) for n in result.added)} to {path}{kept}")
    if backup:
        print(f"your previous launch.json is saved as {backup}")
    if launch.ATTACH in result.added:
        port = args.port or DEFAULT_PORT
        root = args.remote_root or launch.REMOTE_PLACEHOLDER
        host = args.remote_host or "USER@GPU-BOX"
        print(f"to debug on the GPU box: there, in {root}: tensor-dap run --listen {port} --wait train.py; "
              f"here: ssh -N -L {port}:127.0.0.1:{port} {host}, then run '{launch.ATTACH}'")
        if args.remote_root is None:
            print(f"  (set remoteRoot in {path} to the project's path on the box, or pass --remote-root)")
    return 0


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Failed(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _write(path: str, text: str, existing: Optional[str]) -> Optional[str]:
    """Write ``text`` to ``path`` atomically, after copying the old file to a backup that overwrites nothing."""
    folder = os.path.dirname(path)
    backup = None
    try:
        os.makedirs(folder, exist_ok=True)
        if existing is not None:
            backup = _free_name(path + ".bak")
            shutil.copy2(path, backup)
        fd, tmp = tempfile.mkstemp(prefix=".launch.", suffix=".json", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            if existing is not None:
                shutil.copymode(path, tmp)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        if backup and os.path.exists(path):
            os.unlink(backup)  # the original is untouched: no stray copy of it either
        raise _Failed(f"cannot write {path}: {exc.strerror or exc}; nothing was changed") from None
    return backup


def _free_name(path: str) -> str:
    candidate, n = path, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{path}.{n}"
    return candidate
