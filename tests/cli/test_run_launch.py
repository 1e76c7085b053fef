"""``tensor-dap run`` runs the program unchanged (argv, __main__, exit codes, signals) and refuses bad invocations
in one line with exit code 2, before anything runs."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from tensor_dap.cli.main import main

TENSOR_DAP = [sys.executable, "-m", "tensor_dap"]
SHOW = ("import os, sys\nprint(repr(sys.argv), __name__, os.path.isabs(__file__), os.getcwd(), flush=True)\n"
        "sys.exit(int(os.environ.get('CODE', '0')))\n")


def _both(tmp_path, argv, env=None, script=SHOW):
    """The same program under plain python and under tensor-dap run, from the same folder."""
    (tmp_path / "prog.py").write_text(script)
    env = {**os.environ, **(env or {})}
    plain = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=120)
    ours = subprocess.run([*TENSOR_DAP, "run", *argv], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=120)
    return plain, ours


@pytest.mark.parametrize("code", ["0", "3"])
def test_script_sees_what_python_gives_it(tmp_path, code):
    plain, ours = _both(tmp_path, ["prog.py", "--lr", "3", "--wait"], env={"CODE": code})
    assert ours.stdout == plain.stdout and "['prog.py', '--lr', '3', '--wait'] __main__ True" in ours.stdout
    assert ours.returncode == plain.returncode == int(code)


def test_module_runs_like_python_dash_m(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SHOW)
    plain, ours = _both(tmp_path, ["-m", "mypkg.train", "-m", "x", "--listen", "1"], env={"CODE": "4"})
    assert ours.stdout == plain.stdout and "'-m', 'x', '--listen', '1']" in ours.stdout
    assert ours.returncode == plain.returncode == 4


SLEEPER = ("import atexit, sys, time\natexit.register(lambda: print('atexit ran', flush=True))\n"
           "print('ready', flush=True)\ntime.sleep(60)\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_end_the_run_as_they_end_python(tmp_path, sig):
    """Ctrl-C: traceback, atexit handlers, then killed by SIGINT (what torchrun and shells see); SIGTERM: killed."""
    (tmp_path / "prog.py").write_text(SLEEPER)
    results = []
    for cmd in ([sys.executable, "prog.py"], [*TENSOR_DAP, "run", "prog.py"]):
        # SIGINT as a terminal gives it: a test run started in the background inherits it ignored, and
        # Python then never raises KeyboardInterrupt (neither side would end)
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        results.append((proc.returncode, out, err))
    (plain_code, plain_out, plain_err), (code, out, err) = results
    assert code == plain_code == -sig and out == plain_out
    if sig == signal.SIGTERM:
        assert err == plain_err == ""
        return
    # The same traceback: the program's frames only (the line depends on when the signal lands).
    for text in (plain_err, err):
        lines = text.splitlines()
        assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "KeyboardInterrupt"
        frames = [line for line in lines if line.startswith("  File ")]
        assert frames and all('prog.py", line ' in f and f.endswith("in <module>") for f in frames), text


@pytest.mark.parametrize("argv, message", [
    (["missing.py"], "no such script: missing.py"),
    ([], "missing script"),
    (["-m"], "-m needs a module name"),
    (["-m", "no_such_module_here"], "no module named 'no_such_module_here'"),
    (["--wait", "prog.py"], "--wait only makes sense with --listen"),
    (["--allow-remote", "--ranks", "0", "prog.py"], "--allow-remote, --ranks only make sense with --listen"),
    (["--listen", "10.1.2.3:5678", "prog.py"], "refusing to listen on 10.1.2.3"),
    (["--listen", "no-such-host.invalid:5678", "prog.py"], "bad host"),
    (["--listen", "99999", "prog.py"], "0 to 65535"),
    (["--listen", "5678", "--allow-remote", "prog.py"], "loopback host"),
    (["--listen", "5678", "--ranks", "first", "prog.py"], "expected 'all'"),
    (["--loss-above", "inf", "prog.py"], "finite number"),
    (["--loss-above", "x", "prog.py"], "invalid float"),
    (["--hang-after", "0", "prog.py"], "positive number of seconds"),
    (["--trust", "prog.py"], "--trust only makes sense with --replay"),
    (["-m", "torch.distributed.run", "prog.py"], "put tensor-dap inside torchrun"),
    (["--no-such-option", "prog.py"], "unrecognized arguments"),
])
def test_bad_invocations_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text("raise SystemExit('the program must not run')\n")
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensor-dap: error: ") and message in lines[0], captured.err


def test_a_bad_invocation_in_a_real_process_has_no_traceback(tmp_path):
    done = subprocess.run([*TENSOR_DAP, "run", "--listen", "5678", "--allow-remote", "nope.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == "tensor-dap: error: no such script: nope.py\n"


def test_debugpy_missing_is_a_usage_error(tmp_path):
    """A stub stands in for the missing package: a module named debugpy whose import fails, as it would."""
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "debugpy.py").write_text("raise ImportError('No module named debugpy')\n")
    (tmp_path / "prog.py").write_text("print('ran')\n")
    env = _stubbed(tmp_path / "stub")
    done = subprocess.run([*TENSOR_DAP, "run", "--listen", "0", "prog.py"], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "tensor-dap: error: --listen needs debugpy, which is not installed here " \
                          "(pip install debugpy)\n"


def _stubbed(stub):
    """The environment with ``stub`` first on the path (the rest kept, so tensor_dap is still this checkout)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(stub), os.environ.get("PYTHONPATH")) if p)}


def _busy_port():
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    return busy


@pytest.mark.parametrize("argv, message", [
    # the alternatives a refusal suggests use the port asked for, not debugpy's usual 5678
    (["--listen", "0.0.0.0:9000"], "listen on 127.0.0.1 (--listen 9000) and use an SSH tunnel (ssh -N -L "
                                   "9000:127.0.0.1:9000 "),
    (["--listen", "127.0.0.1:9000", "--allow-remote"], "(e.g. --listen 0.0.0.0:9000)"),
    # with --allow-remote, an address this machine does not have is refused before the warning is printed
    (["--listen", "192.0.2.1:0", "--allow-remote"], "--listen: bad host 192.0.2.1: it is not an address of this "
                                                    "machine"),
    (["--listen", "0.0.0.0:BUSY", "--allow-remote"], "--listen: port BUSY on 0.0.0.0 is in use"),
])
def test_a_refused_listen_is_the_only_line_printed(tmp_path, argv, message):
    (tmp_path / "prog.py").write_text("print('the program must not run')\n")
    with _busy_port() as busy:
        port = str(busy.getsockname()[1])
        argv, message = [a.replace("BUSY", port) for a in argv], message.replace("BUSY", port)
        done = subprocess.run([*TENSOR_DAP, "run", *argv, "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith("tensor-dap: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "5678" not in done.stderr and "warning" not in done.stderr, done.stderr


def test_triggers_without_torch_are_refused_before_listening(tmp_path):
    """A stub stands in for a missing torch (a module named torch whose import fails, as it would)."""
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "torch.py").write_text("raise ImportError('No module named torch')\n")
    (tmp_path / "prog.py").write_text("print('the program must not run')\n")
    done = subprocess.run([*TENSOR_DAP, "run", "--listen", "0", "--guard", "prog.py"], cwd=tmp_path,
                          capture_output=True, text=True, env=_stubbed(tmp_path / "stub"), timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "tensor-dap: error: the triggers need torch (No module named torch)\n"
