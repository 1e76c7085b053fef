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
@pytest.mark.parametrize("bug,module_type,step", [("backward_nan", "RowNormalize", 5), ("log_zero", "LogSoftplus", 5)])
def test_vscode_stops_in_a_frame_holding_the_culprit(bug, module_type, step):
    with DapClient.launch(DEBUGGEE, args=[bug], timeout=60) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=90)
        top = dap.stack_trace(ev["threadId"])[0]
        assert top["name"] == "stop_in_debugger"
        local_vars = dap.frame_locals()
        assert {"module", "inputs", "output", "step", "report"} <= set(local_vars)
        assert local_vars["step"]["value"] == str(step)
        assert local_vars["module"]["type"] == module_type
        assert dap.evaluate("report.phase", top["id"])["result"] in ("'forward'", "'backward'")
        assert dap.evaluate("bool(output.isfinite().all())", top["id"])["result"] == (
            "True" if bug == "backward_nan" else "False")  # backward NaN: the forward output was fine
        dap.continue_()
        dap.wait_for_output("TRAINING-DONE", timeout=60)  # continuing resumes training


@pytest.mark.timeout(120)
def test_vscode_still_stops_when_tensor_dap_is_library_code_under_just_my_code():
    """Installed into site-packages, tensor_dap is library code that justMyCode hides; a launch
    rule marking it so stands in for that install. The stop must land in the user's step."""
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
def test_vscode_stops_on_break_if_with_the_loss_in_the_locals():
    with DapClient.launch(DEBUGGEE, args=["break_if"], timeout=60) as dap:
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=90)
        top = dap.stack_trace(ev["threadId"])[0]
        local_vars = dap.frame_locals()
        assert local_vars["step"]["value"] == "4"
        assert dap.evaluate("float(loss)", top["id"])["result"] == "50.0"
        dap.continue_()
        dap.wait_for_output("TRAINING-DONE", timeout=60)


def spawn(arg):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return pexpect.spawn(sys.executable, [DEBUGGEE, arg], encoding="utf-8", timeout=60, env=env,
                         dimensions=(50, 160))


@pytest.mark.timeout(120)
def test_terminal_opens_pdb_with_the_report():
    child = spawn("backward_nan")
    try:
        child.expect(PROMPT)
        shown = child.before
        assert "step 5" in shown and "backward of pre" in shown and "NaN!" in shown
        child.sendline("p step")
        child.expect(PROMPT)
        assert "5" in child.before.splitlines()[-1]
        child.sendline("p type(module).__name__")
        child.expect(PROMPT)
        assert "'RowNormalize'" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


@pytest.mark.timeout(120)
def test_terminal_opens_pdb_on_break_if():
    child = spawn("break_if")
    try:
        child.expect(PROMPT)
        assert "loss 50 is above 10" in child.before
        child.sendline("p step, float(loss)")
        child.expect(PROMPT)
        assert "(4, 50.0)" in child.before
        child.sendline("c")
        child.expect("TRAINING-DONE")
    finally:
        child.close(force=True)
