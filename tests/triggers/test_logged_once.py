"""A program that set up logging to the terminal sees each of watch's lines once, and its log file gets them too.

``logging.basicConfig`` (and timm's train.py, among many) puts a handler on the root logger that writes to stderr;
watch prints its report panel and its lines on stderr itself, so a record handed to that handler as well showed
every line twice (timm's run: ``WARNING: tensor_dap.watch(...): 1 of the 1 steps ...`` and the line again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pexpect
import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent("""
    import logging, sys
    import torch
    from torch import nn
    import tensor_dap

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stdout if sys.argv[2] == "stdout" else sys.stderr)
    logging.getLogger().addHandler(logging.FileHandler(sys.argv[1]))
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="log"):
        for step in range(5):
            x = torch.randn(8, 4)
            if step >= 2:
                x[0, 0] = float("nan")
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    print("done")
""")

REPORT = "tensor_dap trigger · step 2"
END = "of the 5 steps watched were non-finite"


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    env.update(NO_COLOR="1", TERM="xterm")
    return env


def test_a_root_handler_on_stderr_does_not_repeat_the_report_or_the_lines(script, tmp_path):
    log = tmp_path / "run.log"
    run = subprocess.run([sys.executable, str(script), str(log), "stderr"], capture_output=True, text=True,
                         env=_env(), timeout=100)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.count(REPORT) == 1, run.stderr
    assert run.stderr.count(END) == 1, run.stderr
    assert "is non-finite too" in run.stderr
    written = log.read_text()  # the program's log file still gets every one of them
    assert written.count(REPORT) == 1 and written.count(END) == 1 and "is non-finite too" in written


def test_a_handler_on_stdout_of_the_same_terminal_does_not_repeat_them(script, tmp_path):
    log = tmp_path / "run.log"
    child = pexpect.spawn(sys.executable, [str(script), str(log), "stdout"], env=_env(), encoding="utf-8",
                          timeout=100, dimensions=(40, 160))
    child.expect(pexpect.EOF)
    out = child.before
    child.close()
    assert child.exitstatus == 0, out[-2000:]
    assert out.count(REPORT) == 1, out
    assert out.count(END) == 1, out
    written = log.read_text()
    assert written.count(REPORT) == 1 and written.count(END) == 1


def test_a_record_goes_to_a_file_handler_and_not_to_one_writing_to_stderr(tmp_path):
    import logging

    from tensor_dap.console import log_unprinted

    logger = logging.getLogger("tensor_dap.test_logged_once")
    on_stderr, to_file = logging.StreamHandler(sys.stderr), logging.FileHandler(tmp_path / "f.log")
    quiet = logging.FileHandler(tmp_path / "quiet.log")
    quiet.setLevel(logging.ERROR)
    for handler in (on_stderr, to_file, quiet):
        logger.addHandler(handler)
    seen: list[str] = []
    on_stderr.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    try:
        log_unprinted(logger, logging.WARNING, "a line")
        logger.propagate = False
        logger.disabled = True
        log_unprinted(logger, logging.WARNING, "not logged: the logger is disabled")
    finally:
        logger.disabled = False
        for handler in (on_stderr, to_file, quiet):
            logger.removeHandler(handler)
            handler.close()
    assert seen == []
    assert (tmp_path / "f.log").read_text() == "a line\n"
    assert (tmp_path / "quiet.log").read_text() == ""  # the handler's own level is kept
