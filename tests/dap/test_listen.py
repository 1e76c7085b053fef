"""``tensor-dap run --listen``: secure by default, one port per rank, and a real VS Code-style attach."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest
from dapclient import DapClient

from tensor_dap.dap import listen
from tensor_dap.dist import LaunchRank, launch_rank
from tensor_dap.errors import UsageError

TENSOR_DAP = [sys.executable, "-m", "tensor_dap"]


@pytest.mark.parametrize("text, host, port", [
    ("5678", "127.0.0.1", 5678), ("0", "127.0.0.1", 0), ("localhost:6000", "localhost", 6000),
    ("0.0.0.0:5678", "0.0.0.0", 5678), ("[::1]:5678", "::1", 5678),
])
def test_parse_address(text, host, port):
    assert listen.parse_address(text) == listen.Address(host, port)


@pytest.mark.parametrize("text, message", [
    ("70000", "0 to 65535"), ("abc", "0 to 65535"), (":5678", "empty host"), ("::1:5678", "brackets"),
    ("127.0.0.1:", "0 to 65535"),
])
def test_parse_address_errors(text, message):
    with pytest.raises(UsageError, match=message):
        listen.parse_address(text)


def test_loopback_hosts_need_nothing_and_others_need_allow_remote():
    assert listen.check_host("127.0.0.1", allow_remote=False, port=5678) is None
    assert listen.check_host("localhost", allow_remote=False, port=5678) is None
    with pytest.raises(UsageError, match="ssh -N -L 5678:127.0.0.1:5678") as info:
        listen.check_host("0.0.0.0", allow_remote=False, port=5678)
    assert "no authentication" in str(info.value)
    assert "without authentication" in listen.check_host("0.0.0.0", allow_remote=True, port=5678)
    with pytest.raises(UsageError, match="loopback host"):
        listen.check_host("127.0.0.1", allow_remote=True, port=5678)
    with pytest.raises(UsageError, match="bad host"):
        listen.check_host("no-such-host.invalid", allow_remote=True, port=5678)


def test_the_alternatives_suggested_use_the_port_asked_for():
    with pytest.raises(UsageError) as info:
        listen.check_host("0.0.0.0", allow_remote=False, port=9000)
    assert "--listen 9000" in str(info.value) and "ssh -N -L 9000:127.0.0.1:9000 " in str(info.value)
    assert "5678" not in str(info.value)
    with pytest.raises(UsageError, match="-L PORT:127.0.0.1:PORT .*with the PORT it prints"):
        listen.check_host("0.0.0.0", allow_remote=False, port=0)  # the free port is not known yet
    with pytest.raises(UsageError, match=r"--listen 0\.0\.0\.0:9000\)") as info:
        listen.check_host("127.0.0.1", allow_remote=True, port=9000)
    assert "5678" not in str(info.value)


def test_check_bindable_refuses_what_debugpy_could_not_listen_on():
    listen.check_bindable("127.0.0.1", 0)
    with pytest.raises(UsageError, match="bad host 192.0.2.1: it is not an address of this machine"):
        listen.check_bindable("192.0.2.1", 0)  # TEST-NET-1: never an address of this machine
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use"):
            listen.check_bindable("127.0.0.1", port)


def test_ranks_and_ports():
    assert listen.parse_ranks("all") is None
    assert listen.parse_ranks("0, 2") == {0, 2}
    for bad in ("", "0,x", "-1", "1;2"):
        with pytest.raises(UsageError, match="expected 'all'"):
            listen.parse_ranks(bad)
    rank = launch_rank({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert rank == LaunchRank(rank=3, local_rank=1, world_size=4, local_world_size=2) and rank.distributed
    assert listen.port_for(listen.Address("127.0.0.1", 5678), rank) == 5679
    assert listen.port_for(listen.Address("127.0.0.1", 0), rank) == 0  # each rank picks its own free port
    with pytest.raises(UsageError, match="> 65535"):
        listen.port_for(listen.Address("127.0.0.1", 65535), rank)
    assert listen.selected(None, rank) and listen.selected({3}, rank) and not listen.selected({0, 2}, rank)
    assert launch_rank({}) == LaunchRank() and not launch_rank({}).distributed
    assert launch_rank({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}).rank == 5


def test_instructions_print_the_attach_configuration_and_the_tunnel_once_per_machine():
    rank0 = LaunchRank(rank=4, local_rank=0, world_size=8, local_world_size=4)
    lines = listen.instructions("127.0.0.1", 5678, rank0, None, waiting=True, base=5678)
    assert lines[0] == "[rank 4] tensor_dap: debugpy listening on 127.0.0.1:5678 (waiting for a debugger to attach)"
    config = json.loads(lines[2].strip())
    assert config["connect"] == {"host": "127.0.0.1", "port": 5678} and config["type"] == "debugpy"
    assert config["pathMappings"] == [{"localRoot": "${workspaceFolder}", "remoteRoot": os.getcwd()}]
    assert "-L 5678:127.0.0.1:5678 -L 5679:127.0.0.1:5679 -L 5680:127.0.0.1:5680 -L 5681:127.0.0.1:5681" \
        in lines[-1]
    rank1 = LaunchRank(rank=5, local_rank=1, world_size=8, local_world_size=4)
    assert len(listen.instructions("127.0.0.1", 5679, rank1, None, waiting=False, base=5678)) == 1  # its line only
    only2 = listen.instructions("127.0.0.1", 5680, LaunchRank(6, 2, 8, 4), {6}, waiting=False, base=5678)
    assert "-L 5680:127.0.0.1:5680 " in only2[-1] and "5678" not in only2[-1]  # the first *listening* rank
    free = listen.instructions("127.0.0.1", 41234, rank1, None, waiting=False, base=0)  # port 0: each its own
    assert json.loads(free[2].strip())["connect"]["port"] == 41234 and "-L 41234:127.0.0.1:41234 " in free[-1]
    assert "41233" not in "".join(free)


def _script(tmp_path, body):
    path = tmp_path / "prog.py"
    path.write_text(body)
    return path


def test_listen_wait_attach_breakpoint_continue_exit_code_and_output(tmp_path):
    prog = _script(tmp_path, "import sys\ntotal = 0\nfor i in range(3):\n    total += i  # BP\n"
                             "print('TOTAL', total, sys.argv[1:], flush=True)\nsys.exit(7)\n")
    proc = subprocess.Popen([*TENSOR_DAP, "run", "--listen", "127.0.0.1:0", "--wait", str(prog), "--lr", "3"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        first = proc.stderr.readline()
        m = re.search(r"debugpy listening on 127\.0\.0\.1:(\d+) \(waiting for a debugger to attach\)", first)
        assert m, first
        client = DapClient.attach(int(m.group(1)), timeout=60)
        client.set_breakpoints(prog, [4])
        client.configuration_done()
        assert client.wait_for_event("stopped", timeout=60)["reason"] == "breakpoint"
        assert client.frame_locals()["i"]["value"] == "0"
        client.set_breakpoints(prog, [])
        client.continue_()
        assert proc.wait(timeout=60) == 7  # the program's own exit code
        assert "TOTAL 3 ['--lr', '3']" in client.wait_for_output("TOTAL")
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.kill()
    out, err = proc.stdout.read(), first + proc.stderr.read()  # the debugpy adapter exits with the session
    assert out == "TOTAL 3 ['--lr', '3']\n"  # nothing of ours on stdout
    assert "ssh -N -L" in err and "debugger attached" in err


def test_port_in_use_is_one_line_exit_2(tmp_path):
    prog = _script(tmp_path, "print('ran')\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([*TENSOR_DAP, "run", "--listen", str(port), str(prog)], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"tensor-dap: error: --listen: port {port} on 127.0.0.1 is in use " \
                                  "(pick another port, or 0 for a free one)"


def test_non_loopback_refused_and_allowed_with_a_warning(tmp_path):
    prog = _script(tmp_path, "print('ran')\n")
    refused = subprocess.run([*TENSOR_DAP, "run", "--listen", "0.0.0.0:0", str(prog)], capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
    assert "refusing to listen on 0.0.0.0" in refused.stderr and "ssh -N -L" in refused.stderr
    allowed = subprocess.run([*TENSOR_DAP, "run", "--listen", "0.0.0.0:0", "--allow-remote", str(prog)],
                             capture_output=True, text=True, timeout=120)
    assert allowed.returncode == 0 and allowed.stdout == "ran\n"
    assert allowed.stderr.startswith("tensor_dap: warning: debugpy listens on 0.0.0.0 without authentication")
    assert "debugpy listening on 0.0.0.0:" in allowed.stderr


CHILDREN = """import subprocess, sys
import torch
from torch.utils.data import DataLoader, Dataset


class Probe(Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        return torch.tensor(["pydevd" in sys.modules])  # debugpy, when it follows a process, loads pydevd in it


if __name__ == "__main__":
    child = subprocess.run([sys.executable, "-c", "import sys; print('pydevd' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    print("subprocess", child.stdout.strip(), flush=True)
    for batch in DataLoader(Probe(), num_workers=1, multiprocessing_context="spawn"):
        print("DataLoader worker", bool(batch[0]), flush=True)
"""


@pytest.mark.parametrize("flag, followed", [([], False), (["--subprocesses"], True)])
def test_child_processes_are_followed_only_with_subprocesses(tmp_path, flag, followed):
    """A real subprocess and a real DataLoader worker (spawned, so that it starts a fresh interpreter) each say
    whether debugpy is loaded in them. A forked worker inherits the parent's modules, so it cannot say."""
    prog = _script(tmp_path, CHILDREN)
    done = subprocess.run([*TENSOR_DAP, "run", "--listen", "127.0.0.1:0", *flag, str(prog)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"subprocess {followed}\nDataLoader worker {followed}\n"
