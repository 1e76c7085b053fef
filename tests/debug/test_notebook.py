"""Stops in a Jupyter notebook: the page answers pdb's prompt, as it answers ``pdb.set_trace()``.

A kernel's stdin is not a terminal, so tensor_dap once skipped every breakpoint there (``tensor_dap.install()``
turned a notebook's ``breakpoint()`` off) and a trigger raised instead of stopping. A cell run from a page that
answers input (``allow_stdin``) now gets the same stop as a terminal; one run with nobody to answer (``jupyter
nbconvert --execute``, papermill) still never waits. Driven through a real ipykernel (``harness/kernel.py``).
"""

from __future__ import annotations

import re

import pytest

from harness.kernel import TRAIN, kernel

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def notebook():
    with kernel(env={"PYTHONBREAKPOINT": ""}) as k:
        k.run("import tensor_dap, torch\ntensor_dap.install()")
        yield k


def test_a_breakpoint_after_install_stops_and_the_page_answers_the_tensor_aware_prompt(notebook):
    cell = notebook.run("x = torch.ones(3)\nbreakpoint()\nprint('after the breakpoint')", ["p x", "tensors", "c"])
    assert cell.error is None, cell
    assert len(cell.prompts) == 3, cell
    assert cell.text.count("tensor[3] x∈[1, 1] μ=1 σ=0 [1, 1, 1]") == 2, cell.text  # p x, and the tensors table
    assert "skipped" not in cell.text and cell.text.rstrip().endswith("after the breakpoint")


def test_a_trigger_stops_in_the_cell_s_own_frame_and_the_run_goes_on_after_c(notebook):
    cell = notebook.run(TRAIN, ["p step", "where", "c"])
    assert cell.error is None, cell
    assert "non-finite input batch" in cell.text and "step 3" in cell.text
    assert len(cell.prompts) == 3, cell
    after_report = cell.text.split("reproduce it:")[-1]
    assert "\n3\n" in after_report, cell.text  # `p step`, read in the cell's frame: the loop stopped in
    assert "opt.step()" in after_report  # `where` ends at the cell's line
    assert "2 of the 5 steps watched were non-finite" in cell.text and "trained to step 4" in cell.text


def test_a_cell_run_with_nobody_to_answer_never_waits(notebook):
    """``jupyter nbconvert --execute`` runs cells without stdin: the breakpoint is skipped, the trigger raises."""
    cell = notebook.run("breakpoint()\nprint('went on')", allow_stdin=False)
    assert not cell.prompts and cell.error is None and "went on" in cell.text
    assert "skipped" in cell.text
    cell = notebook.run(TRAIN, allow_stdin=False)
    assert not cell.prompts, cell
    assert cell.error is not None and cell.error[0] == "NonFiniteError", cell
    assert "non-finite input batch" in cell.error[1]
    # its traceback: the cell's line, torch's optimizer wrapper, and of tensor_dap's frames (__tracebackhide__) only
    # the raise, which IPython always shows
    shown = cell.traceback.replace("\\", "/")
    assert "opt.step()" in shown and re.search(r"skipping hidden [5-9] frame", shown), shown
    assert shown.count("File /") == 2 and shown.count("tensor_dap/triggers/") == 1, shown  # (the cell: "Cell In")
