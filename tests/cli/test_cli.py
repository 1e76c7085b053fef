"""The tensor-dap command: real subprocesses, as a user runs it."""

import re
import subprocess
import sys

import torch


def tensor_dap(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tensor_dap", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


def test_demo_prints_summaries_with_alarms(tmp_path):
    r = tensor_dap("demo", "tensors", "--dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "logits (NaN/Inf planted)" in r.stdout and re.search(r"NaN!×\d+ \+Inf!×\d+", r.stdout)
    assert "Parameter[256, 784]" in r.stdout and "\x1b[" not in r.stdout  # plain when piped


def test_inspect_checkpoint(tmp_path):
    state = {"model": {"fc.weight": torch.ones(3, 4), "fc.bias": torch.tensor([0.0, float("nan")])}, "step": 7}
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    r = tensor_dap("inspect", str(path))
    assert r.returncode == 0, r.stderr
    assert "model.fc.weight" in r.stdout and "tensor[3, 4] n=12 (48 B) x∈[1, 1]" in r.stdout
    bad = tensor_dap("inspect", str(path), "--nonfinite")
    assert bad.returncode == 1 and "model.fc.bias" in bad.stdout and "model.fc.weight" not in bad.stdout


def test_usage_errors_are_one_line_exit_2(tmp_path):
    for args in (("bogus",), (), ("inspect",), ("inspect", str(tmp_path / "missing.pt"))):
        r = tensor_dap(*args)
        assert r.returncode == 2, (args, r.returncode)
        assert r.stderr.startswith("tensor-dap: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr


def test_unreadable_checkpoint_is_one_line(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a checkpoint")
    r = tensor_dap("inspect", str(path))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("tensor-dap: error: cannot load") and len(r.stderr.strip().splitlines()) == 1


def test_a_closed_pipe_is_not_a_traceback():
    """`tensor-dap doctor --json | head -0`: the reader is gone before the report is written; no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "tensor_dap", "doctor", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    proc.stdout.close()  # before the doctor has gathered anything to print
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
