"""``tensor-dap run --listen``: start debugpy in this process, one port per rank, and say how to attach.

debugpy has no authentication: whoever reaches the port runs code as the user. So the
listener binds 127.0.0.1 unless the user names a non-loopback host *and* passes
``--allow-remote``; the way to reach a remote GPU box is an SSH tunnel to its loopback port.
Under torchrun every rank listens on ``PORT + LOCAL_RANK`` (the ranks chosen by ``--ranks``).
Subprocesses (DataLoader workers) are not followed unless asked: debugpy would attach each
worker, which stalls DDP start-up and breaks workers that fork.
"""

from __future__ import annotations

import getpass
import ipaddress
import json
import os
import socket
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Optional

from ..dist import LaunchRank
from ..errors import UsageError
from ..format import first_line

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 5678
ATTACH_NAME = "Attach to GPU box (SSH tunnel)"  # the launch.json template users already have


@dataclass(frozen=True)
class Address:
    """What ``--listen`` asked for: a host (127.0.0.1 unless given) and a base port (0: any free port)."""

    host: str
    port: int


def parse_address(text: str) -> Address:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT``; a usage error says which part is wrong."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = LOOPBACK, text
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--listen {text}: write an IPv6 host in brackets, e.g. [::1]:{port_text or DEFAULT_PORT}")
    if not host:
        raise UsageError(f"--listen {text}: empty host (use PORT, or HOST:PORT)")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen {text}: the port must be a number from 0 to 65535 (0 picks a free one)")
    return Address(host, int(port_text))


def loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address (127.x, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"--listen: bad host {host!r} ({exc.strerror if isinstance(exc, OSError) else exc})"
                         ) from None
    addresses = {info[4][0].split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_host(host: str, allow_remote: bool, *, port: int) -> Optional[str]:
    """Refuse a non-loopback bind without ``--allow-remote``; with it, the warning to print.
    ``port`` is the one the user asked for: the alternatives the messages suggest use it."""
    local = loopback(host)
    if local and allow_remote:
        raise UsageError(f"--allow-remote with the loopback host {host}: name the address to listen on "
                         f"(e.g. --listen 0.0.0.0:{port}), or drop --allow-remote")
    if local:
        return None
    if not allow_remote:
        tunnel = tunnel_command([port]) if port else f"{tunnel_command(['PORT'])}, with the PORT it prints"
        raise UsageError(f"refusing to listen on {host}: debugpy has no authentication and anyone who reaches "
                         f"the port can run code as you; listen on 127.0.0.1 (--listen {port}) and use an SSH "
                         f"tunnel ({tunnel}), or pass --allow-remote if this network is trusted")
    return (f"warning: debugpy listens on {host} without authentication: anyone who can reach this port can "
            "run code as you (an SSH tunnel to 127.0.0.1 is the safe way)")


def check_bindable(host: str, port: int) -> None:
    """Fail now, in one line, if debugpy could not listen on ``host:port`` (not an address of this machine,
    port in use), so that a mistake is reported before anything else is printed or started."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, where = infos[0]
        with socket.socket(family, kind, proto) as probe:
            if os.name != "nt":  # as a listening server does: a port in TIME_WAIT is free, a listening one is not
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(where)
    except OSError as exc:
        raise UsageError(_listen_error(host, port, exc)) from None


def parse_ranks(text: str) -> Optional[frozenset[int]]:
    """``all`` (None) or a comma list of global ranks such as ``0,2``."""
    if text.strip() == "all":
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise UsageError(f"--ranks {text}: expected 'all' or rank numbers separated by commas, e.g. 0,2")
    return frozenset(int(p) for p in parts)


def port_for(address: Address, rank: LaunchRank) -> int:
    """This rank's port: the base port plus LOCAL_RANK (0 stays 0: every rank picks a free port)."""
    if address.port == 0:
        return 0
    port = address.port + rank.local_rank
    if port > 65535:
        raise UsageError(f"--listen {address.port}: local rank {rank.local_rank} would need port {port} (> 65535)")
    return port


def selected(ranks: Optional[Collection[int]], rank: LaunchRank) -> bool:
    return ranks is None or rank.rank in ranks


def start(address: Address, rank: LaunchRank, *, subprocesses: bool = False) -> tuple[str, int]:
    """Start debugpy listening for this rank; returns the (host, port) it listens on."""
    port = port_for(address, rank)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the frozen-modules note is noise here
    try:
        import debugpy
    except ImportError:
        raise UsageError("--listen needs debugpy, which is not installed here (pip install debugpy)") from None
    try:
        debugpy.configure(subProcess=subprocesses)  # must precede listen(): it decides what debugpy patches
        host, actual = debugpy.listen((address.host, port))
    except (RuntimeError, OSError, ValueError) as exc:
        raise UsageError(_listen_error(address.host, port, exc)) from None
    return str(host), int(actual)


def _listen_error(host: str, port: int, exc: BaseException) -> str:
    text = str(exc)
    if "in use" in text or "Errno 98" in text or "Errno 48" in text:
        return f"--listen: port {port} on {host} is in use (pick another port, or 0 for a free one)"
    if "assign requested address" in text or "Errno 99" in text or "Errno 49" in text:
        return f"--listen: bad host {host}: it is not an address of this machine"
    return f"--listen: could not listen on {host}:{port}: {first_line(exc)}"


def wait_for_client() -> None:
    import debugpy

    debugpy.wait_for_client()


def attach_configuration(port: int, remote_root: str) -> dict[str, Any]:
    """The VS Code configuration that attaches to ``port`` through a tunnel (the template, filled in)."""
    return {"name": ATTACH_NAME, "type": "debugpy", "request": "attach",
            "connect": {"host": LOOPBACK, "port": port},
            "pathMappings": [{"localRoot": "${workspaceFolder}", "remoteRoot": remote_root}],
            "justMyCode": False}


def tunnel_command(ports: Collection[int | str], host: str = "") -> str:
    """``ssh -N -L P:127.0.0.1:P ... user@host``: run on the laptop, then attach VS Code to 127.0.0.1:P."""
    forwards = " ".join(f"-L {p}:127.0.0.1:{p}" for p in sorted(ports))
    return f"ssh -N {forwards} {getpass.getuser()}@{host or socket.gethostname()}"


def instructions(host: str, port: int, rank: LaunchRank, ranks: Optional[Collection[int]], *,
                 waiting: bool, base: Optional[int] = None) -> list[str]:
    """What to print: this rank's line, and how to attach, tunnel included (once per machine when the
    ports are ``base + LOCAL_RANK``; by every rank when each picked a free port, ``base`` 0)."""
    state = "waiting for a debugger to attach" if waiting else "the program runs; attach any time"
    lines = [f"{rank.prefix}tensor_dap: debugpy listening on {host}:{port} ({state})"]
    ports = [port]
    if base and rank.distributed:
        listening = [r for r in range(rank.local_world_size)
                     if ranks is None or rank.rank - rank.local_rank + r in ranks]
        if listening and rank.local_rank != listening[0]:
            return lines  # the first listening rank on this machine prints the how-to once
        ports = [base + r for r in listening]
    config = attach_configuration(ports[0], os.getcwd())
    lines += [
        f"  VS Code: run \"{ATTACH_NAME}\" (tensor-dap init-vscode adds it to .vscode/launch.json), or add:",
        "    " + json.dumps(config),
    ]
    if len(ports) > 1:
        lines.append(f"    (one attach per rank: ports {', '.join(map(str, ports))})")
    if _unspecified(host) or not loopback(host):
        lines.append(f"  from another machine: connect to this machine's address, port {port}")
    else:
        lines.append(f"  from another machine: {tunnel_command(ports)}   (then attach to 127.0.0.1)")
    return lines


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
