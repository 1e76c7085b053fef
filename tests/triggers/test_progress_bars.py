"""What watch prints mid-run goes above the program's tqdm progress bars, on a real pseudo-terminal.

Most training scripts draw a tqdm bar on stderr and redraw it in place with carriage returns. A line
printed while the bar is on screen would start right after the bar's text (``... 18.9it/s]tensor_dap:
...``); the report panel, the "still non-finite" lines and the end-of-run lines clear the bars first and
let tqdm draw them again below.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pexpect
import pytest

pytest.importorskip("tqdm")
pytestmark = pytest.mark.timeout(90)

SCRIPT = textwrap.dedent("""
    import time
    import torch
    from torch import nn
    from tqdm import tqdm
    import tensor_dap

    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="log"):
        for step in tqdm(range(6), desc="train"):
            x = torch.randn(8, 4)
            if step >= 2:
                x[0, 0] = float("nan")
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(0.05)
    print("done")
""")


def test_lines_printed_mid_run_start_on_their_own_line_not_after_the_bar(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    env.update(NO_COLOR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, [str(script)], env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    child.expect(pexpect.EOF)
    out = child.before
    child.close()
    assert child.exitstatus == 0, out[-2000:]
    panel = out.index("tensor_dap trigger · step 2")
    again = out.index("tensor_dap: Linear step 3 is non-finite too")
    for at in (panel, again):
        line = out[out.rfind("\n", 0, at) + 1:at]  # what the terminal holds before it on its line
        assert "it/s]" in line, line  # the bar was drawn there ...
        cleared = line[line.rindex("it/s]"):]
        assert re.fullmatch(r"it/s\]\r +\r(╭─ )?", cleared), repr(cleared)  # ... and wiped before the text
    after = out[again:]
    assert re.search(r"\rtrain: +\d+%", after), "the bar is drawn again below"
    assert "4 of the 6 steps watched were non-finite" in out and "done" in out
