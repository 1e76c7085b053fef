"""Dropout left on in evaluation: a functional dropout without ``training=self.training`` keeps dropping after
``model.eval()``. The first evaluation in eval mode has its dropout calls looked at; one that drops is said once."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers.live_dropout import _Spotter

pytestmark = pytest.mark.timeout(60)


class Net(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.fc1, self.fc2, self.drop = nn.Linear(8, 32), nn.Linear(32, 3), nn.Dropout(0.3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.how == "functional":
            h = F.dropout(h, 0.3)  # BUG: training=self.training
        elif self.how == "flagged":
            h = F.dropout(h, 0.3, training=self.training)
        elif self.how == "torch":
            h = torch.dropout(h, 0.3, True)  # BUG: train=self.training
        elif self.how == "zero":
            h = F.dropout(h, 0.0)
        else:
            h = self.drop(h)
        return self.fc2(h)


def _train_then_evaluate(how: str, watched: bool = True) -> torch.Tensor:
    torch.manual_seed(0)
    model = Net(how)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with tensor_dap.watch(model, optimizer) if watched else torch.enable_grad():
        return torch.stack(_rounds(model, optimizer, x, y))


def _rounds(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor, rounds: int = 2,
            steps: int = 3) -> list[torch.Tensor]:
    """``rounds`` times: ``steps`` training steps, then an evaluation in eval mode (its outputs returned)."""
    outputs = []
    for _ in range(rounds):
        model.train()
        for _ in range(steps):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            outputs.append(model(x))
    return outputs


@pytest.mark.parametrize("how, op", [("functional", "dropout(p=0.3)"), ("torch", "dropout(p=0.3)")])
def test_a_functional_dropout_that_ignores_eval_mode_is_said_once_with_its_line(capfd, how, op):
    _train_then_evaluate(how)
    err = capfd.readouterr().err
    assert err.count("still drops activations") == 1, err
    assert f"tensor_dap: Net is in eval mode, but {op} at test_live_dropout.py:" in err, err
    assert "Pass training=self.training, or use an nn.Dropout layer" in err


def test_the_looked_at_evaluation_gives_what_it_would_have():
    """The mode only looks: the evaluations (dropout draws included) are bit-identical with and without the watch."""
    assert torch.equal(_train_then_evaluate("functional"), _train_then_evaluate("functional", watched=False))


@pytest.mark.parametrize("how", ["flagged", "module", "zero"])
def test_dropout_that_follows_the_mode_or_drops_nothing_is_not_said(capfd, how):
    _train_then_evaluate(how)
    assert "still drops" not in capfd.readouterr().err


def test_a_model_with_a_compiled_part_is_not_looked_at(capfd):
    """A TorchFunctionMode over a compiled submodule would have dynamo trace it again: such a model runs untouched
    (the submodule is marked compiled as ``Module.compile`` marks it, without compiling: that is what is read)."""
    torch.manual_seed(0)
    model = Net("functional")
    model.fc2._compiled_call_impl = model.fc2._call_impl  # what nn.Module.compile() leaves on the module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with tensor_dap.watch(model, optimizer):
        _rounds(model, optimizer, x, y, rounds=1, steps=1)
    assert "still drops" not in capfd.readouterr().err


class Recurrent(nn.Module):
    """pytorch/examples' mnist_rnn: ``nn.Dropout2d`` on the LSTM's last output, a 2-D input torch warns about."""

    def __init__(self):
        super().__init__()
        self.rnn, self.drop, self.fc = nn.LSTM(28, 16, batch_first=True), nn.Dropout2d(0.25), nn.Linear(16, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(self.drop(out[:, -1, :]))


def test_a_warning_of_the_looked_at_evaluation_is_given_where_the_program_called_once():
    """The looked-at evaluation runs each dropout call again from tensor_dap's mode: torch's warning about its caller
    (dropout2d of a 2-D input) must keep its place, torch's dropout layer, and not be shown a second time "from"
    tensor_dap's file (as it was in mnist_rnn)."""
    torch.manual_seed(0)
    model = Recurrent()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(8, 28, 28), torch.randint(0, 10, (8,))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # as a program runs: each warning once per place
        with tensor_dap.watch(model, optimizer):
            _rounds(model, optimizer, x, y, steps=1)
    dropout2d = [w for w in seen if "dropout2d" in str(w.message)]
    assert len(dropout2d) == 1, [(w.filename, w.lineno) for w in dropout2d]
    assert dropout2d[0].filename.endswith(os.path.join("torch", "nn", "modules", "dropout.py"))
    assert not [w for w in seen if os.sep + "tensor_dap" + os.sep in w.filename]


def test_an_op_run_by_the_mode_warns_at_the_program_s_line_whatever_its_stacklevel():
    """``as_called.call`` in one of tensor_dap's modes: a warning about the op's caller names the program's line, the
    one below it in this file; one torch gives about its own code is left where torch gave it."""
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with _Spotter():
            F.dropout2d(x, 0.5, True); line = sys._getframe().f_lineno  # noqa: E702 - the line the warning names
            F.softmax(x)  # implicit dim: warned with stacklevel=3
    places = [(os.path.basename(w.filename), w.lineno) for w in seen]
    assert places == [("test_live_dropout.py", line), ("test_live_dropout.py", line + 1)], places
