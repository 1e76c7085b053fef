"""The tensor-aware pdb as a user meets it: breakpoint() in a real pseudo-terminal (pexpect),
in a batch job (no terminal), and under a real DAP client (debugpy)."""

import os
import re
import subprocess
import sys

import pexpect
import pytest
from dapclient import DapClient
from markers import file_marker_line

DEBUGGEES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "debuggees")
TRAIN = os.path.join(DEBUGGEES, "debuggee_pdb_train.py")
DAP_SCRIPT = os.path.join(DEBUGGEES, "debuggee_pdb_dap.py")
PROMPT = "(Pdb) "


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONBREAKPOINT")}
    env.update(PYTHONBREAKPOINT="tensor_dap.set_trace", TERM="dumb", NO_COLOR="1", COLUMNS="200")
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def _spawn(env, cwd=DEBUGGEES):
    child = pexpect.spawn(sys.executable, [TRAIN], env=env, cwd=cwd, encoding="utf-8", timeout=30,
                          dimensions=(60, 200))
    child.expect_exact(PROMPT)
    return child


def _run(child, command):
    """Type a command; return what it printed before the next prompt."""
    child.sendline(command)
    child.expect_exact(PROMPT)
    return child.before


def _finish(child):
    child.sendline("c")
    child.expect_exact("finished True")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.timeout(90)
def test_breakpoint_session_shows_tensors_and_runs_every_command():
    child = _spawn(_env())
    try:
        # stopped in the user's frame, on the line after breakpoint()
        assert f"debuggee_pdb_train.py({file_marker_line(TRAIN, 'BREAKPOINT') + 1})main()" in child.before

        out = _run(child, "p x")
        assert re.search(r"tensor\[32, 8\] n=256 \(1\.0 KiB\) x∈\[-?[\d.]+, [\d.]+\] μ=\S+ σ=\S+", out)
        out = _run(child, "p batch")
        assert re.search(r"\['input'\]\s+tensor\[32, 8\]", out) and re.search(r"\['ids'\]\s+\[1, 2, 3\]", out)
        assert "tensor([" not in _run(child, "pp target")
        assert "tensor([0., 0., 0., 0., 0.])" in _run(child, "p! w")  # raw repr on request
        assert re.search(r"^tensor\[32, 4\] n=128", _run(child, "target"), re.MULTILINE)  # bare expression

        out = _run(child, "tensors")
        assert re.search(r"logits\s+NaN/Inf\s+tensor\[4, 10\].*NaN!×\d+", out)
        assert re.search(r"elsewhere\s+other device\s+tensor\[3\] meta", out)
        assert re.search(r"model\.0\.weight\s+requires_grad\s+Parameter\[16, 8\]", out)
        assert "logits" in _run(child, "t")

        out = _run(child, "nan")
        assert "NaN/Inf in 1 of" in out and re.search(r"logits\s+1\s+0\s+0\s+2\.5%", out)

        out = _run(child, "grads model")
        assert re.search(r"0\.bias\s+\[16\]\s+0\s+zero", out) and re.search(r"total norm [\d.]+\s+1 zero", out)
        assert "gradients of model" in _run(child, "grads")  # default: first module in locals
        # a module named as tensor_dap's reports and tables print it ("0" is not Python): walked from 'model'
        out = _run(child, "grads model.0")
        assert "gradients of model.0" in out and re.search(r"^\s*bias\s+\[16\]\s+0\s+zero", out, re.M), out
        assert re.search(r"^\(model\)\s+Linear\s+\[32, 8\]\s+\[32, 16\]", _run(child, "shapes model.0 x"), re.M)
        assert "Linear" in _run(child, "p model.4")
        assert "model.4 (Linear) has no submodule or attribute 'nope'" in _run(child, "p model.4.nope")

        out = _run(child, "shapes model x")
        assert re.search(r"0\s+Linear\s+\[32, 8\]\s+\[32, 16\]\s+f32\s+cpu\s+144", out)
        assert re.search(r"1\s+BatchNorm1d\s+\[32, 16\]\s+\[32, 16\]", out)
        assert re.search(r"4\s+Linear\s+\[32, 16\]\s+\[32, 4\]", out)
        assert "True" in _run(child, "p same(before, state(model))")  # modes, BN stats, RNG untouched

        out = _run(child, "mem")
        assert re.search(r"process RSS\s+\d+(\.\d)? MiB", out) and "largest tensors in this frame" in out

        out = _run(child, "stats x")
        assert re.search(r"mean\s+-?[\d.]+", out) and "histogram" in out and "█" in out
        assert "256 finite values" in out

        assert "tensor[5] all zeros" in _run(child, "display w")
        out = _run(child, "n")
        assert re.search(r"display w: tensor\[5\] x∈\[1, 1\].*\[old: tensor\[5\] all zeros", out)

        assert "not an nn.Module" in _run(child, "grads x")
        assert "usage: shapes MODULE INPUT" in _run(child, "shapes model")
        assert "NameError" in _run(child, "stats nope")
        assert "Print the value of the expression" in _run(child, "help p")
        assert "Table of every tensor" in _run(child, "help t")
        for command, usage, says in [("tensors", "tensors [expression]", "requires_grad"),
                                     ("nan", "nan [expression]", "worst first"),
                                     ("grads", "grads [module]", "total norm"),
                                     ("shapes", "shapes module input", "restored"),
                                     ("mem", "mem", "CUDA allocated / reserved / peak"),
                                     ("stats", "stats expression", "histogram"),
                                     ("pp", "pp expression", "pp! expression"),
                                     ("display", "display [expression]", "changed in place")]:
            out = _run(child, f"help {command}")
            assert out.splitlines()[1].strip().startswith(usage) and says in " ".join(out.split()), out
        _finish(child)
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
def test_colours_on_a_terminal(tmp_path):
    child = _spawn(_env(NO_COLOR=None, TERM="xterm-256color"))
    try:
        assert "\x1b[" in _run(child, "nan")  # NaN counts in red
        assert "\x1b[" not in _run(child, "p 1 + 1")  # non-tensor values print exactly as pdb's
        _finish(child)
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
def test_no_color_on_a_colour_terminal_is_plain(tmp_path):
    child = _spawn(_env(NO_COLOR="1", TERM="xterm-256color"))
    try:
        out = _run(child, "nan") + _run(child, "tensors") + _run(child, "grads")
        assert "NaN/Inf in 1 of" in out and "gradients of model" in out
        assert "\x1b[" not in out
        _finish(child)
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
def test_pdbrc_aliases_and_interact_still_work(tmp_path):
    (tmp_path / ".pdbrc").write_text("alias xs p x.shape\n")
    child = _spawn(_env(HOME=str(tmp_path)), cwd=str(tmp_path))
    try:
        assert "torch.Size([32, 8])" in _run(child, "xs")
        child.sendline("interact")
        child.expect_exact(">>> ")
        child.sendline("int(x.shape[0]) * 2")
        child.expect_exact("64")
        # ^D only once the console reads again: sent while readline is still switching the terminal
        # back to raw mode, the line discipline's EOF is lost (seen once in a clean-clone run)
        child.expect_exact(">>> ")
        child.sendeof()
        child.expect_exact(PROMPT)
        _finish(child)
    finally:
        child.close(force=True)


LEAKY = """\
import torch, torch.nn.functional as F
from torch import nn


def train():
    model = nn.Linear(8, 3)
    optimizer = torch.optim.Adam(model.parameters())
    total = 0
    for _ in range(30):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0]))
        loss.backward()
        optimizer.step()
        total += loss  # BUG: loss.item()
    breakpoint()
    print("finished", True)


train()
"""


@pytest.mark.timeout(60)
def test_mem_says_what_the_frames_keep(tmp_path):
    """``mem`` after the memory table: the running total kept with its graphs, the model's and the optimizer's
    bytes, from the frames of the program's own code."""
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY)
    child = pexpect.spawn(sys.executable, [str(script)], env=_env(), cwd=str(tmp_path), encoding="utf-8", timeout=30,
                          dimensions=(60, 200))
    try:
        child.expect_exact(PROMPT)
        out = " ".join(_run(child, "mem").split())
        assert "process RSS" in out
        assert "`total` is 30 additions kept with their graphs: if it is a running total of the loss" in out, out
        assert "`model` (Linear): 108 B of parameters, 108 B of gradients" in out
        assert "`optimizer` (Adam): 224 B of optimizer state" in out
        _finish(child)
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stdin", ["devnull", "closed"])
def test_without_a_terminal_breakpoint_logs_and_continues(stdin):
    cmd = [sys.executable, TRAIN] if stdin == "devnull" else ["sh", "-c", f'exec "{sys.executable}" "{TRAIN}" 0<&-']
    r = subprocess.run(cmd, check=False, stdin=subprocess.DEVNULL if stdin == "devnull" else None, capture_output=True,
                       text=True, env=_env(), timeout=50)
    assert r.returncode == 0, r.stderr
    assert "finished True" in r.stdout
    where = f"debuggee_pdb_train.py:{file_marker_line(TRAIN, 'BREAKPOINT')} in main"
    assert f"breakpoint at {where} skipped: stdin is not a terminal" in r.stderr


@pytest.mark.timeout(90)
def test_set_trace_under_a_dap_client_stops_in_the_users_frame():
    with DapClient.launch(DAP_SCRIPT, env={"NO_COLOR": "1"}, timeout=30) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=30)
        top = dap.stack_trace(ev["threadId"])[0]
        # pydevd stops on the next line of the frame it is given (like debugpy.breakpoint()):
        # the user's step(), right after the set_trace() call, never inside tensor_dap
        assert top["name"] == "step" and top["source"]["path"] == DAP_SCRIPT
        assert top["line"] == file_marker_line(DAP_SCRIPT, "STOP-NEXT")
        assert "x" in dap.frame_locals()
        dap.continue_()
        out = dap.wait_for_output("done 6.0", timeout=30)
        assert "trigger: loss is NaN" in out and PROMPT not in out


@pytest.mark.timeout(30)
def test_set_trace_with_header_off_a_terminal_keeps_the_report(capsys):
    import tensor_dap

    tensor_dap.set_trace(header="loss became NaN at step 12")  # pytest's stdin is not a terminal
    err = capsys.readouterr().err
    assert "loss became NaN at step 12\n" in err, err
    assert "test_pdb_session.py" in err and "skipped: stdin is not a terminal" in err
