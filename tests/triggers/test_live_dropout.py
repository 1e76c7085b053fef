"""Dropout left on in evaluation: a functional dropout without ``training=self.training`` keeps dropping after
``model.eval()``. The first evaluation in eval mode has its dropout calls looked at; one that drops is said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

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
    outputs = []
    with tensor_dap.watch(model, optimizer) if watched else torch.enable_grad():
        for _ in range(2):
            model.train()
            for _ in range(3):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                outputs.append(model(x))
    return torch.stack(outputs)


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
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            model(x)
    assert "still drops" not in capfd.readouterr().err
