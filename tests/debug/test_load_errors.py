"""load_state_dict's "Error(s) in loading state_dict": the crash report runs the checkpoint check on the model and
the state dict torch's own frame still holds, and says the cause with its fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from crashes import run_script

from tensor_dap.debug.crash import build_report

pytestmark = pytest.mark.timeout(60)


def _net(classes: int = 2) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, classes))


def _failure(model: nn.Module, state: dict) -> BaseException:
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        return exc
    raise AssertionError("load_state_dict did not raise")


def test_a_data_parallel_prefix_is_named_with_the_line_that_strips_it():
    saved = {"module." + k: v for k, v in _net().state_dict().items()}
    advice = build_report(_failure(_net(), saved)).advice
    assert advice.startswith("tensor_dap: 0 of 4 model keys load as saved; 4 behind a prefix"), advice
    assert "saved from a DataParallel/DistributedDataParallel wrapper" in advice
    assert "fix: state = {k.removeprefix('module.'): v for k, v in state.items()}" in advice


def test_a_compiled_models_prefix_is_named_too():
    """torch.compile's wrapper saves its keys under ``_orig_mod.`` (made here by renaming: compiling would only slow
    the test, the keys are what the check reads)."""
    saved = {"_orig_mod." + k: v for k, v in _net().state_dict().items()}
    assert "saved from a torch.compile'd model" in build_report(_failure(_net(), saved)).advice


def test_a_head_of_another_size_says_which_and_what_to_drop():
    advice = build_report(_failure(_net(classes=5), _net(classes=10).state_dict())).advice
    assert "2 keys with another shape (2.weight: shape [5, 8] in the model, [10, 8] in the checkpoint)" in advice
    assert "5 here, 10 in the checkpoint" in advice and "fix: drop this entry" in advice


def test_other_errors_get_no_advice():
    try:
        torch.zeros(2) @ torch.zeros(3)
    except RuntimeError as exc:
        assert build_report(exc).advice == ""


def test_the_advice_is_printed_by_tensor_dap_run(tmp_path):
    """Through the real command, where the state dict came from a file (torch's message lists the keys only)."""
    script = tmp_path / "resume.py"
    saved = str(tmp_path / "c.pt")
    script.write_text("import torch\nfrom torch import nn\n"
                      "net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
                      f"torch.save({{'module.' + k: v for k, v in net.state_dict().items()}}, {saved!r})\n"
                      f"net.load_state_dict(torch.load({saved!r}))\n")
    done = run_script(script)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "tensor_dap: 0 of 4 model keys load as saved; 4 behind a prefix" in err, err
    assert "k.removeprefix('module.')" in err
