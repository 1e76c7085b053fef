"""`tensor-dap run` and install(post_mortem=True): crash reports, post-mortem, exit codes."""

import os
import re
import subprocess
import sys

import pexpect
import pytest

DEBUGGEES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "debuggees")
CRASH = os.path.join(DEBUGGEES, "debuggee_pdb_crash.py")
INSTALL = os.path.join(DEBUGGEES, "debuggee_pdb_install.py")


def _env():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    env.update(NO_COLOR="1", TERM="dumb")
    return env


def _run(*args, env=None):
    return subprocess.run([sys.executable, *args], check=False, capture_output=True, text=True,
                          env=env or _env(), stdin=subprocess.DEVNULL, timeout=60)


def _spawn(script, env=None):
    """`tensor-dap run script` on a real pseudo-terminal."""
    return pexpect.spawn(sys.executable, ["-m", "tensor_dap", "run", script], env=env or _env(), encoding="utf-8",
                         timeout=30, dimensions=(60, 200))


def _quit(child):
    """`q` at the post-mortem prompt: the program ends with the crash's exit code, 1."""
    child.sendline("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


@pytest.mark.timeout(60)
def test_run_explains_a_shape_mismatch_and_exits_nonzero():
    r = _run("-m", "tensor_dap", "run", CRASH, "--lr", "3")
    assert r.returncode == 1
    assert "args ['--lr', '3']" in r.stdout  # the script sees its own argv
    err = r.stderr
    assert err.startswith("Traceback (most recent call last):")
    assert "runpy" not in err and "tensor_dap" not in err.split("RuntimeError")[0]  # starts in the script
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)" in err
    assert "tensors in debuggee_pdb_crash.py:9 in step" in err
    assert re.search(r"^\s*h\s+tensor\[4, 3\]", err, re.MULTILINE)
    assert f"at {CRASH}:9 in step" in err and "return h @ w" in err
    assert re.search(r"^\s*h\s+\[4, 3\]\s+f32 cpu$", err, re.MULTILINE)
    assert re.search(r"^\s*w\s+\[4, 5\]\s+f32 cpu$", err, re.MULTILINE)
    assert "h has 3 columns (last dim) but w has 4 rows" in err
    assert "no post-mortem debugger" in err


@pytest.mark.timeout(60)
def test_run_opens_post_mortem_on_a_terminal():
    child = _spawn(CRASH)
    try:
        child.expect_exact("the inner dimensions differ")
        child.expect_exact("(Pdb) ")
        child.sendline("p h")
        child.expect(r"tensor\[4, 3\] n=12")
        child.expect_exact("(Pdb) ")
        child.sendline("where")  # the crash's frames, from the script's own <module>: none of the runner's
        child.expect_exact("(Pdb) ")
        stack = child.before
        assert "debuggee_pdb_crash.py" in stack and "<module>()" in stack
        assert "tensor_dap" not in stack and "tensor-dap" not in stack and "runpy" not in stack, stack
        _quit(child)
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
def test_install_post_mortem_reports_broadcast_errors():
    r = _run(INSTALL)
    assert r.returncode == 1
    assert re.search(r"^\s*scores\s+\[8, 3\]", r.stderr, re.MULTILINE)
    assert re.search(r"^\s*bias\s+\[4\]", r.stderr, re.MULTILINE)
    assert "dim -1 is 3 vs 4" in r.stderr


@pytest.mark.timeout(60)
def test_run_usage_errors_and_exit_codes(tmp_path):
    r = _run("-m", "tensor_dap", "run", str(tmp_path / "missing.py"))
    assert r.returncode == 2 and r.stderr.strip() == f"tensor-dap: error: no such script: {tmp_path / 'missing.py'}"
    r = _run("-m", "tensor_dap", "run")
    assert r.returncode == 2 and r.stderr.startswith("tensor-dap: error: missing script")
    assert len(r.stderr.strip().splitlines()) == 1
    script = tmp_path / "exits.py"
    script.write_text("import sys\nprint(__name__)\nsys.exit(3)\n")
    r = _run("-m", "tensor_dap", "run", str(script))
    assert r.returncode == 3 and r.stdout.strip() == "__main__" and r.stderr == ""


@pytest.mark.timeout(60)
def test_run_routes_breakpoint_and_quitting_is_not_a_crash():
    child = _spawn(os.path.join(DEBUGGEES, "debuggee_pdb_train.py"))
    try:
        child.expect_exact("(Pdb) ")
        child.sendline("p x")
        child.expect(r"tensor\[32, 8\] n=256")  # breakpoint() opened tensor_dap's debugger
        child.expect_exact("(Pdb) ")
        child.sendline("where")  # the runner under the program is tensor_dap's: left out, as python script.py has none
        child.expect_exact("(Pdb) ")
        stack = child.before
        assert "debuggee_pdb_train.py" in stack and "<module>()" in stack
        assert "tensor_dap/" not in stack and "runner.py" not in stack, stack
        child.sendline("up")  # the script's <module> is the outermost frame now
        child.expect_exact("(Pdb) ")
        child.sendline("up")
        child.expect_exact("(Pdb) ")
        assert "Oldest frame" in child.before
        child.sendline("q")
        child.expect(pexpect.EOF)
        assert "Traceback" not in child.before and "BdbQuit" not in child.before
        child.close()
        assert child.exitstatus == 1
    finally:
        child.close(force=True)


@pytest.mark.timeout(60)
def test_piped_crash_report_keeps_long_lines_whole():
    r = _run("-m", "tensor_dap", "run", os.path.join(DEBUGGEES, "debuggee_pdb_ckpt.py"))
    assert r.returncode == 1
    # a log must stay greppable: the error's lines are not re-wrapped at the pipe's 120 columns
    line = ("size mismatch for 0.weight: copying a param with shape torch.Size([8, 4]) from checkpoint, "
            "the shape in current model is torch.Size([16, 4]).")
    assert line in r.stderr, r.stderr
    assert "Shape error (size mismatch)" in r.stderr
    assert ("→ 3 of 4 tensors differ in shape: 0.weight: checkpoint [8, 4] vs model [16, 4]; "
            "0.bias: checkpoint [8] vs model [16]; 2.weight: checkpoint [3, 8] vs model [3, 16]") in r.stderr


@pytest.mark.timeout(60)
def test_crash_report_colours_follow_the_terminal():
    env = {**_env(), "TERM": "xterm-256color"}
    env.pop("NO_COLOR")
    r = _run("-m", "tensor_dap", "run", CRASH, env=env)
    assert r.returncode == 1 and "the inner dimensions differ" in r.stderr
    assert "\x1b[" not in r.stderr  # a pipe gets plain text, even with a colour TERM
    child = _spawn(CRASH, env)
    try:
        child.expect_exact("(Pdb) ")
        assert "\x1b[" in child.before  # on a terminal the report is coloured
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


@pytest.mark.timeout(120)
def test_crash_report_folds_library_frames_and_bounds_its_cost():
    """Torch's frames fold into one line that says how many; a broadcast mask in the frame costs nothing."""
    deep = os.path.join(DEBUGGEES, "debuggee_crash_deep.py")
    r = _run("-m", "tensor_dap", "run", deep)
    assert r.returncode == 1
    err = r.stderr
    folded = re.findall(r"^  \[\.\.\. (\d+) frames in torch hidden; TENSOR_DAP_FULL_TRACEBACK=1 shows them\]$", err,
                        re.MULTILINE)
    assert folded and sum(map(int, folded)) >= 6
    assert 'line 14, in forward' in err and "return model(x)" in err  # the user's frames stay
    assert "linear.py" in err.split("RuntimeError:")[0]  # the frame that raised stays
    assert re.search(r"^mask\s+tensor\[32, 16, 2048, 2048\] expanded n=2147483648 .* x∈\[1, 1\] μ=1 σ=0", err, re.M)
    assert re.search(r"^patches\s+tensor\[1, 3, 209, 209, 16, 16\]", err, re.M)
    report = err.split("tensor_dap: stdin is not a terminal")[0]
    assert len(report.splitlines()) <= 50  # traceback, tensors and explanation on one screen
    full = _run("-m", "tensor_dap", "run", deep, env={**_env(), "TENSOR_DAP_FULL_TRACEBACK": "1"})
    assert "frames in torch hidden" not in full.stderr and "module.py" in full.stderr
    assert len(full.stderr.splitlines()) > len(err.splitlines())


@pytest.mark.timeout(60)
def test_post_mortem_starts_in_the_users_frame_when_torch_raised():
    """The exception comes from torch's own Python (functional.py): the prompt opens on the user's line that
    called it, with the user's locals, and `down` still reaches torch's frame."""
    child = _spawn(os.path.join(DEBUGGEES, "debuggee_pdb_crash_in_torch.py"))
    try:
        child.expect_exact("(raised in ")
        child.expect(r"functional\.py:\d+ in binary_cross_entropy; `down` goes there\)")
        child.expect_exact("-> return F.binary_cross_entropy(scaled, labels)  # CALLS-TORCH")
        child.expect_exact("(Pdb) ")
        child.sendline("p scaled")
        child.expect_exact("tensor[2] x∈[0.6, 1.6]")
        child.expect_exact("(Pdb) ")
        child.sendline("down")
        child.expect(r"functional\.py\(\d+\)binary_cross_entropy\(\)")
        child.expect_exact("(Pdb) ")
        _quit(child)
    finally:
        child.close(force=True)


INPLACE = '''
import torch
from torch import nn
import tensor_dap

model = nn.Sequential(nn.Linear(4, 8), nn.Sigmoid(), nn.ReLU(inplace=True), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(3, 4)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


@pytest.mark.timeout(120)
def test_an_inplace_error_says_how_to_have_its_line_named(tmp_path):
    """Run plainly, torch's "modified by an inplace operation" gets the hint that a watch names the op and line;
    run with --guard, the note names them and the hint is not repeated."""
    script = tmp_path / "inplace.py"
    script.write_text(INPLACE)
    plain = _run("-m", "tensor_dap", "run", str(script))
    assert plain.returncode == 1
    err = " ".join(plain.stderr.split())
    assert "modified by an inplace operation" in err
    assert "tensor_dap: run it under a watch (tensor-dap run --guard" in err
    guarded = _run("-m", "tensor_dap", "run", "--guard", str(script))
    assert guarded.returncode == 1
    err = " ".join(guarded.stderr.split())
    assert "the tensor backward() needs is the output of sigmoid [3, 8]" in err, err
    assert "the output of sigmoid [3, 8] in 1 (Sigmoid) at inplace.py:9" in err, err  # the model's call: no line in it
    assert ("changed in place by relu (inplace=True) in 2 (ReLU) at inplace.py:9 "
            "(`loss = model(torch.randn(3, 4)).sum()`)") in err
    assert "run it under a watch" not in err


CARRIED = '''
import torch
from torch import nn

rnn, hidden = nn.RNN(4, 4), torch.zeros(1, 2, 4)
for step in range(2):
    out, hidden = rnn(torch.randn(3, 2, 4), hidden)
    out.sum().backward()
'''


@pytest.mark.timeout(120)
def test_a_freed_graph_error_says_how_to_have_its_carrier_named(tmp_path):
    """The same for "backward through the graph a second time": plainly, the hint; with --guard, the note names
    the hidden state the loop carries without detach()."""
    script = tmp_path / "carried.py"
    script.write_text(CARRIED)
    plain = " ".join(_run("-m", "tensor_dap", "run", str(script)).stderr.split())
    assert "this error names the tensor that carries the freed graph" in plain, plain
    assert "or the loss whose earlier backward() freed it" in plain
    guarded = " ".join(_run("-m", "tensor_dap", "run", "--guard", str(script)).stderr.split())
    assert ("tensor_dap: `hidden` [1, 2, 4], handed to the model at carried.py:7 "
            "(`out, hidden = rnn(torch.randn(3, 2, 4), hidden)`) still carries the graph") in guarded, guarded
    assert "run it under a watch" not in guarded


@pytest.mark.timeout(60)
def test_errors_that_are_not_about_shapes_are_titled_for_what_they_are(tmp_path):
    script = tmp_path / "classes.py"
    script.write_text("import torch\nimport torch.nn.functional as F\n"
                      "scores, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 3])\nF.cross_entropy(scores, y)\n")
    err = " ".join(_run("-m", "tensor_dap", "run", str(script)).stderr.split())
    assert "Out of range: IndexError: Target 3 is out of bounds." in err and "Shape error" not in err
    assert "`y` holds classes 0–3 but `scores` scores 3 classes (0–2)" in err, err


@pytest.mark.timeout(60)
def test_a_perplexity_that_overflows_names_the_loss_that_diverged(tmp_path):
    """word_language_model's logging line, `math.exp(cur_loss)`, after AdamW kept the SGD rate of 20: Python says
    "math range error" and nothing more; the report names the value and what a loss that large means."""
    r = _crashed(tmp_path / "lm.py", "import argparse, math\n"
                                     "import torch\n"
                                     "args = argparse.Namespace(log_interval=20)\n"
                                     "loss = torch.tensor(2110.0)\n"
                                     "total_loss = float(loss) * args.log_interval\n"
                                     "cur_loss = total_loss / args.log_interval\n"
                                     "print('loss {:5.2f} | ppl {:8.2f}'.format(\n"
                                     "    cur_loss, math.exp(cur_loss)))\n")
    err = " ".join(r.stderr.split())
    assert "OverflowError: math range error" in err
    assert ("tensor_dap: cur_loss = 2110 on this line, where exp() of anything above 709.78 overflows a float. Taken "
            "of a loss (a perplexity), a loss that large means the training diverged: lower the learning rate") in err


@pytest.mark.timeout(60)
def test_a_math_range_error_away_from_exp_gets_no_advice(tmp_path):
    r = _crashed(tmp_path / "pw.py", "import math\nx = 1e200\nprint(math.pow(x, 3))\n")
    assert "OverflowError: math range error" in r.stderr
    assert "overflows a float" not in r.stderr


@pytest.mark.timeout(60)
def test_an_op_with_no_sparse_kernel_names_the_sparse_tensor_and_folds_torch_s_dispatch_table(tmp_path):
    """pytorch/examples' GCN without self-loops: its degree vector stays sparse int64 and `1 / degree` has no kernel.
    torch's message is followed by ~90 lines of its dispatch table; the report folds them and names the tensor."""
    script = tmp_path / "gcn.py"
    r = _crashed(script, "import torch\n"
                         "adj = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (3, 3),\n"
                         "                              dtype=torch.int64)\n"
                         "weights = torch.ones(3)\n"
                         "degree = torch.sum(adj, dim=1)\n"
                         "norm = weights * torch.sqrt(1 / degree)\n")
    assert ("NotImplementedError: Could not run 'aten::reciprocal' with arguments from the 'SparseCPU' backend"
            in r.stderr)
    assert "registered at" not in r.stderr
    assert re.search(r"\[\.\.\. \d{2,} lines of torch's dispatch table \(the backends with a kernel\) hidden; "
                     r"TENSOR_DAP_FULL_TRACEBACK=1 shows them\]", r.stderr)
    err = " ".join(r.stderr.split())
    assert ("tensor_dap: reciprocal has no kernel for sparse tensors (SparseCPU), and `degree` is sparse: torch "
            "implements only some ops for sparse layouts; make it dense first (`degree.to_dense()`)") in err
    assert "`weights`" not in err  # the line's dense tensor is not named
    full = _run("-m", "tensor_dap", "run", str(script), env={**_env(), "TENSOR_DAP_FULL_TRACEBACK": "1"})
    assert full.stderr.count("registered at") > 10


def _crashed(script, source):
    """``source`` written to ``script`` and run by `tensor-dap run`: it crashes (exit code 1)."""
    script.write_text(source)
    r = _run("-m", "tensor_dap", "run", str(script))
    assert r.returncode == 1
    return r


def test_an_op_with_no_kernel_on_the_cpu_is_said_plainly():
    """An op of another device's library called on the CPU: the backend is named once, no tensor is."""
    import torch

    from tensor_dap.debug import no_kernel

    try:
        torch.ops.aten._cudnn_init_dropout_state(0.5, True, 1, dtype=torch.uint8, device="cpu")
    except NotImplementedError as exc:
        text = no_kernel.advice(exc, exc.__traceback__)
    assert text.startswith("tensor_dap: _cudnn_init_dropout_state has no kernel for CPU tensors: this build of "
                           "torch has none for this device"), text
