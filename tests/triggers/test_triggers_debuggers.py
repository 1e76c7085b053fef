"""Where a fired trigger goes, end to end: a batch job raises, VS Code (real debugpy over the
DAP client) stops in a frame holding the culprit, a terminal gets tensor_dap's pdb (real pty)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("debugpy")
from dapclient import DapClient  # noqa: E402 - only once debugpy is known to be there

DEBUGGEES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "debuggees")
DEBUGGEE = os.path.join(DEBUGGEES, "debuggee_triggers_auto.py")
PROMPT = r"\([A-Za-z-]*[Pp]db\) "  # tensor_dap's pdb keeps pdb's prompt (and so does the stdlib fallback)


@pytest.mark.timeout(90)
def test_batch_job_raises_with_the_report():
    proc = subprocess.run([sys.executable, DEBUGGEE, "inf_input"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=80, check=False)
    assert proc.returncode == 1
    assert "TRAINING-DONE" not in proc.stdout
    last = proc.stderr.strip().splitlines()
    assert any(line.startswith("tensor_dap.errors.NonFiniteError: tensor_dap trigger · step 5") for line in last)
    assert "where: input of inp (Linear)" in proc.stderr and "+Inf!" in proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bug,module_type,op", [("backward_nan", "RowNormalize", "SqrtBackward0"),
                                                ("log_zero", "LogSoftplus", "log")])
def test_vscode_stops_in_the_users_frame_before_the_update(bug, module_type, op):
    with DapClient.launch(DEBUGGEE, args=[bug], timeout=60) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=90)
        top = dap.stack_trace(ev["threadId"])[0]
        assert top["name"] == "train_step" and top["source"]["path"].endswith("planted.py")  # the user's frame
        assert {"x", "y", "model", "optimizer"} <= set(dap.frame_locals())
        culprit = "tensor_dap.culprit()"  # as the stop says, in a frame whose module never imported tensor_dap
        assert dap.evaluate(f"type({culprit}.module).__name__", top["id"])["result"] == f"'{module_type}'"
        assert dap.evaluate(f"({culprit}.step, {culprit}.report.op)", top["id"])["result"] == f"(5, '{op}')"
        # stopped before the update: the parameters are still finite
        assert dap.evaluate("all(bool(p.isfinite().all()) for p in model.parameters())", top["id"])["result"] == "True"
        dap.request("next", {"threadId": ev["threadId"]})  # stepping works from there
        dap.wait_for_event("stopped", timeout=60)
        dap.continue_()
        dap.wait_for_output("TRAINING-DONE", timeout=60)  # continuing resumes training


@pytest.mark.timeout(120)
def test_vscode_still_stops_when_tensor_dap_is_library_code_under_just_my_code():
    """Installed into site-packages, tensor_dap is library code that justMyCode hides; a launch
    rule marking it so stands in for that install. The stop lands in the same user frame."""
    rules = {"rules": [{"module": "tensor_dap", "include": False}]}
    with DapClient.launch(DEBUGGEE, args=["inf_input"], timeout=60, just_my_code=True, extra=rules) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=90)
        top = dap.stack_trace(ev["threadId"])[0]
        assert top["name"] == "train_step" and top["source"]["path"].endswith("planted.py")
        assert {"x", "y", "model", "optimizer"} <= set(dap.frame_locals())
        assert "step 5" in dap.output_text()  # the report is in the debug console
        dap.continue_()
        dap.wait_for_output("TRAINING-DONE", timeout=60)


@pytest.mark.timeout(120)
def test_vscode_stops_on_break_if_in_the_callers_frame():
    with DapClient.launch(DEBUGGEE, args=["break_if"], timeout=60) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=90)
        top = dap.stack_trace(ev["threadId"])[0]
        assert top["name"] == "main"
        local_vars = dap.frame_locals()
        assert local_vars["step"]["value"] == "4"
        assert dap.evaluate("float(loss)", top["id"])["result"] == "50.0"
        dap.continue_()
        dap.wait_for_output("TRAINING-DONE", timeout=60)


def spawn(arg, cwd):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return pexpect.spawn(sys.executable, [DEBUGGEE, arg], encoding="utf-8", timeout=60, env=env,
                         dimensions=(50, 160), cwd=str(cwd))


@pytest.mark.timeout(120)
def test_terminal_opens_pdb_in_the_users_frame_with_library_frames_hidden(tmp_path):
    child = spawn("backward_nan", tmp_path)
    try:
        child.expect(PROMPT)
        shown = child.before
        assert "step 5" in shown and "SqrtBackward0" in shown and "NaN!" in shown and "planted.py" in shown
        child.sendline("where")
        child.expect(PROMPT)
        stack = child.before
        assert "train_step" in stack and "debuggee_triggers_auto.py" in stack
        assert "tensor_dap" + os.sep not in stack and os.sep + "torch" + os.sep not in stack
        child.sendline("p type(__import__('tensor_dap').culprit().module).__name__")
        child.expect(PROMPT)
        assert "'RowNormalize'" in child.before
        child.sendline("up")  # straight to the training loop: w.step and torch's frames are hidden
        child.expect(PROMPT)
        child.sendline("p step")
        child.expect(PROMPT)
        assert child.before.strip().splitlines()[-1].strip() == "5"
        child.sendline("down")
        child.expect(PROMPT)
        child.sendline("n")  # stepping over the update lands on the next line of the step
        child.expect(PROMPT)
        assert "return loss" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
        after = child.before
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    # never silently: the NaN the update wrote makes every later step non-finite, and the end says so
    assert "is non-finite too" in after and "steps watched were non-finite (the first at step 5)" in after


@pytest.mark.timeout(120)
def test_terminal_quit_ends_the_program(tmp_path):
    child = spawn("backward_nan", tmp_path)
    try:
        child.expect(PROMPT)
        child.sendline("q")
        child.expect(pexpect.EOF)
        assert "TRAINING-DONE" not in child.before
    finally:
        child.close(force=True)
    assert child.exitstatus != 0 or child.signalstatus is not None


@pytest.mark.timeout(120)
def test_terminal_opens_pdb_on_break_if(tmp_path):
    child = spawn("break_if", tmp_path)
    try:
        child.expect(PROMPT)
        assert "loss 50 is above 10" in child.before
        child.sendline("p step, float(loss)")  # the caller's frame: main's own locals
        child.expect(PROMPT)
        assert "(4, 50.0)" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
    finally:
        child.close(force=True)


@pytest.mark.timeout(120)
def test_terminal_stops_a_loop_updating_by_hand_before_its_update(tmp_path):
    """``tensor-dap run --break-on-nan`` on a loop with no torch.optim optimizer (pytorch/examples' word language
    model): the gradients are checked as backward() returns, so pdb opens on that line, before the update."""
    script = os.path.join(DEBUGGEES, "debuggee_by_hand.py")
    child = pexpect.spawn(sys.executable, ["-m", "tensor_dap", "run", "--break-on-nan", script], encoding="utf-8",
                          timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"}, dimensions=(50, 160),
                          cwd=str(tmp_path))
    try:
        child.expect(PROMPT)
        shown = child.before
        assert "no torch.optim optimizer made: watching Net" in shown
        assert "step 3" in shown and "SqrtBackward0" in shown and "backward of act (RootAct)" in shown
        with open(script, encoding="utf-8") as f:
            birth = next(n for n, text in enumerate(f, 1) if text.rstrip().endswith("# BIRTH"))
        assert f"debuggee_by_hand.py:{birth}" in shown
        child.sendline("p step, all(bool(p.isfinite().all()) for p in model.parameters())")
        child.expect(PROMPT)
        assert child.before.strip().splitlines()[-1].strip() == "(3, True)"  # not updated with NaN yet
        child.sendline("where")
        child.expect(PROMPT)
        assert "loss.backward()" in child.before and "tensor_dap" + os.sep not in child.before
        # the stop's header says tensor_dap.culprit(): it works in a program that never imported tensor_dap
        child.sendline("p type(tensor_dap.culprit().module).__name__")
        child.expect(PROMPT)
        assert child.before.strip().splitlines()[-1].strip() == "'RootAct'", child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
        after = child.before
        child.expect(pexpect.EOF)
        after += child.before  # the count comes as the run ends
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "step 4 is non-finite too" in after  # never silently
    assert "3 of the 6 steps watched were non-finite (the first at step 3)" in after


WRAPPER = '''import torch


class WrappedOptimizer:  # what accelerate's AcceleratedOptimizer and Lightning's LightningOptimizer are
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self, closure=None):
        return self.optimizer.step(closure)


def train(model, optimizer, batches):  # a trainer's loop (HF's Trainer._run_epoch)
    wrapped = WrappedOptimizer(optimizer)
    for step, x in enumerate(batches):
        optimizer.zero_grad()
        out = model(x)
        torch.where(out > 0, torch.sqrt(out), out).sum().backward()
        wrapped.step()  # TRAINER-STEP
'''
SCRIPT = '''import torch
import trainer_lib

model = torch.nn.Linear(4, 4)
trainer_lib.train(model, torch.optim.SGD(model.parameters(), lr=0.1), [torch.randn(8, 4) for _ in range(3)])
print("TRAINING-DONE")
'''


def _run_under_a_trainer(tmp_path, name, library, script):
    """``tensor-dap run --break-on-nan main.py`` in a terminal, ``main.py`` training through the installed
    package ``name`` (in a site-packages folder: not the user's code)."""
    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / f"{name}.py").write_text(library)
    (tmp_path / "main.py").write_text(script)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(site)}
    return pexpect.spawn(sys.executable, ["-m", "tensor_dap", "run", "--break-on-nan", "main.py"], cwd=str(tmp_path),
                         encoding="utf-8", timeout=60, env=env, dimensions=(50, 160))


@pytest.mark.timeout(120)
def test_terminal_stops_in_a_trainers_loop_not_in_its_optimizer_wrapper(tmp_path):
    """A trainer steps through a wrapper (accelerate, Lightning): pdb opens in the loop that called it, where
    the batch and the model are, and says that loop is a library's."""
    child = _run_under_a_trainer(tmp_path, "trainer_lib", WRAPPER, SCRIPT)
    try:
        child.expect(PROMPT)
        shown = " ".join(child.before.split())
        assert "stopped in trainer_lib's code, at wrapped.step() # TRAINER-STEP, before the update" in shown
        assert "-> wrapped.step() # TRAINER-STEP" in shown and "trainer_lib.py" in shown
        child.sendline("p step, x.shape")
        child.expect(PROMPT)
        assert "(0, torch.Size([8, 4]))" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
    finally:
        child.close(force=True)


LIGHTNING_LIKE = '''import torch


class Precision:  # Lightning's precision plugin: the frame that calls the optimizer
    def optimizer_step(self, optimizer, closure):
        return optimizer.step(closure=closure)


class Strategy:
    def __init__(self):
        self.precision = Precision()

    def optimizer_step(self, optimizer, closure):
        return self.precision.optimizer_step(optimizer, closure)


def run(model, optimizer, strategy, kwargs):  # Lightning's automatic optimization: the batch is in kwargs
    def closure():
        optimizer.zero_grad()
        loss = model(kwargs["batch"]).pow(2).mean()
        loss.backward()
        return loss
    strategy.optimizer_step(optimizer, closure)


def fit(model, optimizer, batches):  # the epoch loop: it holds the batch
    strategy = Strategy()
    for batch_idx, batch in enumerate(batches):
        run(model, optimizer, strategy, {"batch": batch})  # LOOP-LINE
'''
LIGHTNING_SCRIPT = '''import torch
import lit_lib

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
batches = [torch.randn(8, 4) for _ in range(4)]
batches[2][3, 1] = float("nan")
lit_lib.fit(model, torch.optim.Adam(model.parameters(), lr=0.1), batches)
print("TRAINING-DONE")
'''


@pytest.mark.timeout(120)
def test_terminal_stops_where_a_trainer_holds_the_batch(tmp_path):
    """Lightning steps through its precision plugin, its strategy and its module's hook, with a closure: the frame
    that calls the optimizer has no batch in reach, and pdb opens in the loop above that holds it (found on
    Lightning 2.6, where it opened in ``precision.py``, seven frames below the epoch loop's ``batch``)."""
    child = _run_under_a_trainer(tmp_path, "lit_lib", LIGHTNING_LIKE, LIGHTNING_SCRIPT)
    try:
        child.expect(PROMPT)
        shown = " ".join(child.before.split())
        assert "step 2 · non-finite input batch" in shown
        assert "stopped in lit_lib's code, at run(model, optimizer, strategy, {\"batch\": batch}) # LOOP-LINE" in shown
        child.sendline("p batch_idx, batch.isnan().sum().item()")
        child.expect(PROMPT)
        assert "(2, 1)" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
    finally:
        child.close(force=True)
