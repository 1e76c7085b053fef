"""``tensor-dap stacks PID``: the stacks of a running process, from the handler ``tensor-dap run`` installed."""

import os
import subprocess
import sys

import pytest

from tensor_dap.cli.main import main

TENSOR_DAP = [sys.executable, "-m", "tensor_dap"]
SLEEPER = """import threading, time
def wait_here():
    time.sleep(120)  # WAITING
threading.Thread(target=time.sleep, args=(120,), name="loader", daemon=True).start()
print("ready", flush=True)
wait_here()
"""


@pytest.fixture
def started(tmp_path):
    procs = []

    def start(cmd, script=SLEEPER):
        (tmp_path / "prog.py").write_text(script)
        proc = subprocess.Popen([*cmd, "prog.py"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        assert proc.stdout.readline() == "ready\n"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.communicate(timeout=30)


def test_stacks_of_a_process_tensor_dap_run_started(started):
    proc = started([*TENSOR_DAP, "run"])
    done = subprocess.run([*TENSOR_DAP, "stacks", str(proc.pid)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first == f"pid {proc.pid}: prog.py:3 in wait_here: time.sleep(120)  # WAITING"
    assert any('prog.py", line 3 in wait_here' in line for line in rest)  # faulthandler's dump, all threads
    assert sum(line.startswith("Thread 0x") for line in rest) >= 1
    again = subprocess.run([*TENSOR_DAP, "stacks"], capture_output=True, text=True, timeout=120)
    assert f"pid {proc.pid}: prog.py:3 in wait_here" in again.stdout  # no PID: every process tensor-dap run started
    assert proc.poll() is None  # the process keeps running


def test_a_program_with_its_own_sigusr1_handler_keeps_it(started):
    script = ("import signal, time\nsignal.signal(signal.SIGUSR1, lambda *a: print('mine', flush=True))\n"
              "print('ready', flush=True)\nwhile True: time.sleep(0.05)\n")
    proc = started([*TENSOR_DAP, "run"], script)
    done = subprocess.run([*TENSOR_DAP, "stacks", str(proc.pid), "--timeout", "1"], capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.readline() == "mine\n"  # the program's handler ran, not ours
    assert done.returncode == 1 and "did not answer SIGUSR1" in done.stderr


def _path_with(tmp_path, py_spy=None):
    """A PATH holding only a folder with (or without) a ``py-spy``: py-spy is not installed here, and a
    real one elsewhere on PATH must not change what these tests see."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if py_spy is not None:
        spy = bin_dir / "py-spy"
        spy.write_text(f"#!{sys.executable}\n{py_spy}")
        spy.chmod(0o755)
    return {**os.environ, "PATH": str(bin_dir)}


def test_another_process_without_py_spy_is_one_clear_line(started, tmp_path):
    proc = started([sys.executable])
    done = subprocess.run([*TENSOR_DAP, "stacks", str(proc.pid)], capture_output=True, text=True, timeout=120,
                          env=_path_with(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"tensor-dap: error: process {proc.pid} was not started by tensor-dap run, and py-spy "
                           "is not installed (pip install py-spy)\n")


# Stands in for py-spy (not installed here): answers `py-spy dump --pid PID` as py-spy does, from the stack
# the sleeper is really in, and records the arguments it was given.
FAKE_PY_SPY = """import os, sys
open(os.environ["SPY_ARGS"], "w").write(" ".join(sys.argv[1:]))
prog = os.environ["SPY_PROG"]
print(f"Process {sys.argv[3]}: python prog.py")
print("Python v3.11.4 (/usr/bin/python3.11)")
print()
print(f'Thread {sys.argv[3]} (idle): "MainThread"')
print(f"    wait_here ({prog}:3)")
print(f"    <module> ({prog}:6)")
print('Thread 4242 (idle): "loader"')
print("    run (/usr/lib/python3.11/threading.py:975)")
"""


def test_another_process_is_read_with_py_spy(started, tmp_path):
    proc = started([sys.executable])
    env = {**_path_with(tmp_path, FAKE_PY_SPY), "SPY_ARGS": str(tmp_path / "args"),
           "SPY_PROG": str(tmp_path / "prog.py")}
    done = subprocess.run([*TENSOR_DAP, "stacks", str(proc.pid)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text() == f"dump --pid {proc.pid}"
    first, *rest = done.stdout.splitlines()
    assert first == f"pid {proc.pid} (py-spy): prog.py:3 in wait_here: time.sleep(120)  # WAITING"
    assert f"Process {proc.pid}: python prog.py" in rest and '    run (/usr/lib/python3.11/threading.py:975)' in rest
    assert proc.poll() is None


def test_py_spy_refused_is_one_clear_line(started, tmp_path):
    """The stand-in fails as py-spy does without ptrace permission."""
    proc = started([sys.executable])
    refuse = "import sys\nprint('Error: Permission Denied (os error 13)', file=sys.stderr)\nsys.exit(1)\n"
    done = subprocess.run([*TENSOR_DAP, "stacks", str(proc.pid)], capture_output=True, text=True, timeout=120,
                          env=_path_with(tmp_path, refuse))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"tensor-dap: error: process {proc.pid} was not started by tensor-dap run, and py-spy "
                           "could not read it: Error: Permission Denied (os error 13) (py-spy needs the same user "
                           "and ptrace permission, or root)\n")


def test_usage_errors(capsys):
    assert main(["stacks", str(2**22 + 12345)]) == 2
    assert capsys.readouterr().err == f"tensor-dap: error: no process with pid {2**22 + 12345}\n"
    assert main(["stacks", "abc"]) == 2
    assert "invalid int value" in capsys.readouterr().err
    assert main(["stacks", str(os.getpid()), "--timeout", "0"]) == 2
