"""JupyterLab's visual debugger shows tensor_dap's summaries: it speaks DAP to the kernel's own debugpy (ipykernel's
debugger, over the control channel), which loads the ``pydevd_plugins`` renderers as VS Code's debugpy does. Driven
as the page drives it (``harness/kernel.py``: initialize, attach, dumpCell, setBreakpoints, configurationDone, run the
cell, stopped, stackTrace, scopes, variables), through a real ipykernel; no browser (the page only shows what these
replies hold)."""

from __future__ import annotations

import pytest

from harness.kernel import TRAIN, kernel

pytestmark = pytest.mark.timeout(240)

CELL = """import torch
x = torch.randn(3, 4)
x[0, 1] = float("nan")
big = torch.zeros(2000, 1000)
print("ran")
"""
STOP_LINE = 5  # print("ran")


def test_the_variables_panel_and_its_explorer_show_the_summary_and_its_children(tmp_path):
    with kernel(cwd=str(tmp_path)) as k:  # (away from the checkout: the installed renderers load)
        assert k.debug("initialize", {"clientID": "jupyterlab", "adapterID": "python", "pathFormat": "path",
                                      "linesStartAt1": True, "columnsStartAt1": True, "supportsVariableType": True,
                                      "supportsVariablePaging": True})["success"]
        assert k.debug("attach")["success"]
        path = k.debug("dumpCell", {"code": CELL})["body"]["sourcePath"]  # the file the cell is compiled as
        placed = k.debug("setBreakpoints", {"source": {"path": path}, "breakpoints": [{"line": STOP_LINE}]})
        assert placed["body"]["breakpoints"][0]["verified"], placed
        assert k.debug("configurationDone")["success"]
        k.execute(CELL)
        thread = k.debug_event("stopped")["body"]["threadId"]
        frame = k.debug("stackTrace", {"threadId": thread})["body"]["stackFrames"][0]
        assert frame["line"] == STOP_LINE
        scope = k.debug("scopes", {"frameId": frame["id"]})["body"]["scopes"][0]
        shown = {v["name"]: v for v in k.debug("variables", {"variablesReference": scope["variablesReference"]})
                 ["body"]["variables"]}
        x, big = shown["x"], shown["big"]
        assert x["value"].startswith("tensor[3, 4]") and "NaN!×1" in x["value"], x
        assert big["value"].startswith("tensor[2000, 1000]") and "all zeros" in big["value"], big  # not 2M numbers
        children = [v["name"] for v in k.debug("variables", {"variablesReference": x["variablesReference"]})
                    ["body"]["variables"]]
        assert children[:4] == ["shape", "dtype", "device", "stats"], children
        assert k.debug("continue", {"threadId": thread})["success"]
        explorer = {v["name"]: v["value"] for v in k.debug("inspectVariables")["body"]["variables"]}  # not stopped
        assert explorer["x"].startswith("tensor[3, 4]") and "NaN!×1" in explorer["x"], explorer.get("x")


UPDATE_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if line.strip() == "opt.step()")


def test_a_trigger_stops_in_jupyterlabs_debugger_in_the_cell_with_the_tensors_shown(tmp_path):
    """With the page's debugger on, a watch's trigger stops there (a DAP client is attached: the kernel's debugpy),
    in the cell's own frame before the update, and the run goes on when the page continues."""
    with kernel(cwd=str(tmp_path)) as k:
        assert k.debug("initialize", {"clientID": "jupyterlab", "adapterID": "python", "pathFormat": "path",
                                      "linesStartAt1": True, "columnsStartAt1": True})["success"]
        assert k.debug("attach")["success"]
        path = k.debug("dumpCell", {"code": TRAIN})["body"]["sourcePath"]
        assert k.debug("configurationDone")["success"]
        k.execute(TRAIN)
        thread = k.debug_event("stopped")["body"]["threadId"]
        frame = k.debug("stackTrace", {"threadId": thread})["body"]["stackFrames"][0]
        assert (frame["source"]["path"], frame["line"]) == (path, UPDATE_LINE), frame
        scope = k.debug("scopes", {"frameId": frame["id"]})["body"]["scopes"][0]
        listed = k.debug("variables", {"variablesReference": scope["variablesReference"]})["body"]["variables"]
        shown = {v["name"]: v["value"] for v in listed}
        assert shown["step"] == "3" and "NaN!×1" in shown["x"] and shown["loss"].startswith("tensor[] nan"), shown
        assert k.debug("continue", {"threadId": thread})["success"]
        after = k.run("print(step)")  # run once the training cell has ended
        assert after.text.strip() == "4", after
