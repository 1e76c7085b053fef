"""End-to-end checks of tests/harness/dapclient.py against the real debugpy adapter (no torch needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from dapclient import DapClient, DapError, attach_to_listener, free_port
from markers import marker_line

pytest.importorskip("debugpy")

SCRIPT = textwrap.dedent(
    """\
    import sys
    total = 0
    for i in range(6):
        total += i  # BP-loop
        print("iter", i)
    x = 41
    name = "hello"
    print("done", x + 1, sys.argv[1:], flush=True)  # BP-end
    sys.stderr.write("bye-stderr\\n")
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.mark.timeout(60)
def test_breakpoint_locals_and_hover_evaluate(script):
    with DapClient.launch(script, args=["a1"], timeout=30) as dap:
        bps = dap.set_breakpoints(script, [marker_line(SCRIPT, "BP-end")])
        assert bps[0]["verified"]
        dap.configuration_done()
        ev = dap.wait_for_event("stopped", timeout=30)
        assert ev["reason"] == "breakpoint"
        frames = dap.stack_trace(ev["threadId"])
        assert frames[0]["line"] == marker_line(SCRIPT, "BP-end")

        local_vars = dap.frame_locals()
        assert local_vars["x"]["value"] == "41"
        assert local_vars["x"]["type"] == "int"
        assert local_vars["name"]["value"] == "'hello'"
        assert local_vars["total"]["value"] == "15"

        result = dap.evaluate("x + 1", frames[0]["id"], context="hover")
        assert result["result"] == "42"
        assert result["type"] == "int"
        with pytest.raises(DapError, match="NameError"):
            dap.evaluate("no_such_name", frames[0]["id"], context="hover")


@pytest.mark.timeout(60)
def test_conditional_breakpoint_stops_at_right_iteration(script):
    with DapClient.launch(script, timeout=30) as dap:
        loop = marker_line(SCRIPT, "BP-loop")
        dap.set_breakpoints(script, [loop], conditions={loop: "i == 3"})
        dap.set_exception_breakpoints(["uncaught"])
        dap.configuration_done()
        dap.wait_for_event("stopped", timeout=30)
        local_vars = dap.frame_locals()
        assert local_vars["i"]["value"] == "3"
        assert local_vars["total"]["value"] == "3"  # 0 + 1 + 2, line not yet executed
        dap.continue_()
        dap.wait_for_event("terminated", timeout=30)  # condition never true again


@pytest.mark.timeout(60)
def test_continue_to_termination_captures_output(script):
    with DapClient.launch(script, args=["a1", "a2"], env={"TENSOR_DAP_TEST": "1"}, timeout=30) as dap:
        dap.set_breakpoints(script, [marker_line(SCRIPT, "BP-loop")])
        dap.configuration_done()
        dap.wait_for_event("stopped", timeout=30)
        dap.set_breakpoints(script, [])  # clear, then run to the end
        dap.continue_()
        assert dap.wait_for_event("exited", timeout=30)["exitCode"] == 0
        dap.wait_for_event("terminated", timeout=30)
        assert "bye-stderr" in dap.wait_for_output("bye-stderr", timeout=10, category="stderr")
        out = dap.wait_for_output("done 42 ['a1', 'a2']", timeout=10, category="stdout")
        assert "iter 5" in out
        assert "done 42 ['a1', 'a2']" in out
        # Waiting for something that can no longer happen fails fast, with context.
        with pytest.raises(DapError, match="terminated") as info:
            dap.wait_for_event("stopped", timeout=20)
        assert "done 42" in str(info.value)


@pytest.mark.timeout(60)
def test_attach_to_listening_debuggee(script, tmp_path):
    port = free_port()
    env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    proc, dap = attach_to_listener(
        [sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{port}", "--wait-for-client", script], port,
        log_dir=str(tmp_path / "logs"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        with dap:
            loop = marker_line(SCRIPT, "BP-loop")
            dap.set_breakpoints(script, [loop], conditions={loop: "i == 2"})
            dap.configuration_done()
            ev = dap.wait_for_event("stopped", timeout=30)
            assert dap.frame_locals(ev["threadId"])["i"]["value"] == "2"
            frame_id = dap.stack_trace(ev["threadId"])[0]["id"]
            assert dap.evaluate("i * 10", frame_id, context="repl")["result"] == "20"
            dap.continue_(ev["threadId"])
            dap.wait_for_event("terminated", timeout=30)
            assert "done 42" in dap.wait_for_output("done 42", timeout=10)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0
        assert "iter 5" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
