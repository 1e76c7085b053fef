"""Hang watchdog: no optimizer step for a while → every thread's stack on disk and where each rank waits."""

import glob
import json
import os
import socket
import subprocess
import sys
import time

import torch

from tensor_dap.dist import LaunchRank
from tensor_dap.triggers import hang

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST_JOB = os.path.join(HERE, "debuggees", "debuggee_launch_dist.py")


def _steps(optimizer, n):
    for _ in range(n):
        optimizer.zero_grad()
        optimizer.param_groups[0]["params"][0].sum().backward()
        optimizer.step()


def _stuck(seconds):
    time.sleep(seconds)  # HANG-HERE


def test_a_stall_writes_the_stacks_and_the_run_goes_on(tmp_path, capsys):
    w_param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([w_param], lr=0.1)
    with hang.watchdog(0.4, root=str(tmp_path), rank=LaunchRank(), startup=0.4) as dog:
        _steps(optimizer, 2)
        _stuck(1.5)
        assert len(dog.reports) == 1  # fired once for this stall, not again every 0.4 s
        _steps(optimizer, 1)  # a step re-arms it
        _stuck(1.5)
        assert len(dog.reports) == 2 and dog.steps == 3
    text = open(os.path.join(dog.reports[0], "rank0.txt")).read()
    assert "no optimizer step for" in text and "(after 2 steps)" in text
    assert "main thread: test_hang.py:" in text and "time.sleep(seconds)  # HANG-HERE" in text
    assert f'File "{__file__}"' in text  # the full stack, in Python's traceback format
    assert "tensor_dap-hang-watchdog" not in text  # its own thread is left out
    assert json.load(open(os.path.join(dog.reports[0], "rank0.json")))["steps"] == 2
    err = capsys.readouterr().err
    assert err.count("no optimizer step for") == 2 and "HANG-HERE" in err


def test_start_up_gets_longer_than_a_step(tmp_path):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    with hang.watchdog(0.3, root=str(tmp_path), rank=LaunchRank(), startup=5.0) as dog:
        _stuck(1.0)  # imports and data loading before the first step
        assert dog.reports == []
        _steps(optimizer, 1)
        _stuck(1.0)
        assert len(dog.reports) == 1


def test_suggested_value_from_the_median_step(capsys):
    assert hang.suggested(0.01) == 30 and hang.suggested(2.0) == 40 and hang.suggested(7.77) == 160
    dog = hang.Watchdog(None, rank=LaunchRank(rank=0, local_rank=0, world_size=2, local_world_size=2))
    try:
        for _ in range(hang.SUGGEST_AFTER):
            dog.beat()
        assert dog.median_step() is not None and dog.median_step() < 0.1
    finally:
        dog.close()
    assert "--hang-after 30 would write every rank's stacks" in capsys.readouterr().err


def _two_free_ports():
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as a, socket.socket() as b:
                try:
                    a.bind(("127.0.0.1", port))
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports")


def test_torchrun_ranks_ports_and_a_hang_report_naming_both_places(tmp_path):
    """2 CPU ranks (gloo) under torchrun: only --ranks 1 listens, on PORT+1; at step 2 rank 1 sleeps while rank 0
    waits in all_reduce: both write their stacks, rank 0 says where each is, and the job still finishes."""
    port = _two_free_ports()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "tensor_dap", "run", "--listen", f"127.0.0.1:{port}", "--ranks", "1", "--hang-after", "2",
           DIST_JOB, "hang", "8"]
    # (TMPDIR: torchrun leaves its log folder, /tmp/torchelastic_*, behind even when the job ends well)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - start < 240
    assert "RANK 0 DONE" in done.stdout and "RANK 1 DONE" in done.stdout
    assert f"[rank 1] tensor_dap: debugpy listening on 127.0.0.1:{port + 1}" in done.stderr
    assert "[rank 0] tensor_dap: debugpy listening" not in done.stderr  # --ranks 1: rank 0 runs without a listener
    for rank in (0, 1):  # each rank's lines say whose they are, as every tensor_dap line of a rank does
        assert f"[rank {rank}] tensor_dap: no " in done.stderr and f"[rank {rank}]   main thread: " in done.stderr
    folders = glob.glob(str(tmp_path / ".tensor_dap" / "incidents" / "*-hang"))
    assert len(folders) == 1, folders
    names = sorted(os.listdir(folders[0]))
    assert names == ["rank0.json", "rank0.txt", "rank1.json", "rank1.txt", "summary.txt"]
    summary = open(os.path.join(folders[0], "summary.txt")).read().splitlines()
    assert summary[0].startswith("rank 0: all_reduce (torch.distributed) at debuggee_launch_dist.py:")
    assert "dist.all_reduce(w.grad)" in summary[0]
    assert summary[1].startswith("rank 1: debuggee_launch_dist.py:") and "time.sleep(sleep)" in summary[1]
    assert "where each rank is" in done.stderr


def test_watch_hang_after_starts_and_stops_a_watchdog(tmp_path, monkeypatch):
    """`watch(..., hang_after=)`, the in-code `tensor-dap run --hang-after`: its watchdog lives as long as the watch."""
    import torch

    import tensor_dap

    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    w = tensor_dap.watch(model, optimizer, hang_after=60, capture=False)
    assert w._hang is not None and w._hang.hang_after == 60
    assert w._hang._thread is not None and w._hang._thread.is_alive()
    w.close()
    w._hang._thread.join(timeout=10)
    assert not w._hang._thread.is_alive()


def test_a_loop_updating_by_hand_beats_the_watchdog_at_each_backward(tmp_path, monkeypatch):
    """No optimizer steps there, so the step a watchdog counts is each backward() (else it would call the run hung)."""
    import torch

    import tensor_dap

    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(2, 1)
    with tensor_dap.watch(model, hang_after=60, capture=False) as w:
        for _ in range(3):
            model.zero_grad()
            model(torch.ones(4, 2)).sum().backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
        assert w._hang is not None and w._hang.steps == 3 == w.step_count


def test_the_first_steps_collective_still_gets_the_start_up_allowance(tmp_path):
    """The first backward() is no completed step: an optimizer step may follow that waits in its collective for a rank
    still starting up (under torchrun, the one a debugger listens in). Only a step or a second backward() ends it."""
    w_param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([w_param], lr=0.1)
    with hang.watchdog(0.3, root=str(tmp_path), rank=LaunchRank(), startup=30.0) as dog:
        w_param.sum().backward()
        _stuck(1.0)  # the first all_reduce, waiting for the slow rank
        assert dog.reports == []
        optimizer.step()
        _stuck(1.5)
        assert len(dog.reports) == 1
    with hang.watchdog(0.3, root=str(tmp_path), rank=LaunchRank(), startup=30.0) as dog:
        for _ in range(2):
            w_param.sum().backward()  # a loop updating by hand: its second backward() ends start-up
        _stuck(1.5)
        assert len(dog.reports) == 1


def test_a_loop_updating_by_hand_resets_the_clock_at_each_backward(tmp_path, capsys):
    """No optimizer steps in a loop that updates by hand: each backward() is its step (``tensor-dap run --hang-after``
    would otherwise call every such run hung); an optimizer loop is counted once per step as before."""
    w_param = torch.nn.Parameter(torch.ones(2))
    with hang.watchdog(0.4, root=str(tmp_path), rank=LaunchRank(), startup=0.4) as dog:
        for _ in range(6):
            w_param.sum().backward()
            with torch.no_grad():
                w_param -= 0.1 * w_param.grad
            time.sleep(0.15)  # each step well under hang_after, all of them well over it
        assert dog.reports == [] and dog.steps == 6
        _stuck(1.0)
        assert len(dog.reports) == 1
    assert "no step (backward()) for" in open(os.path.join(dog.reports[0], "rank0.txt")).read()
    optimizer = torch.optim.SGD([w_param], lr=0.1)
    with hang.watchdog(60, root=str(tmp_path), rank=LaunchRank()) as dog:
        _steps(optimizer, 3)
        assert dog.steps == 3
