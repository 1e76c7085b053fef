"""A model updated in eval mode (``model.eval()`` for a validation, no ``model.train()`` after) is said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from markers import file_marker_line
from torch import nn

import tensor_dap
from tensor_dap.triggers import eval_mode

pytestmark = pytest.mark.timeout(60)


def _model(dropout: float = 0.2) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 2))


def _epochs(model: nn.Module, *, train_each_epoch: bool, mode: str = "loop", epochs: int = 3) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses = []

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    with tensor_dap.watch(model, optimizer, on="raise") as w:
        for _ in range(epochs):
            if train_each_epoch:
                model.train()
            for _ in range(4):
                x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 2, (16,), generator=gen)
                losses.append((w.step(step, x, y) if mode == "step" else step(x, y)).item())
            model.eval()  # a validation
            with torch.no_grad():
                model(torch.randn(16, 8, generator=gen))
    return losses


@pytest.mark.parametrize("mode", ["loop", "step"])
def test_training_on_after_a_validation_in_eval_mode_is_said_once(capfd, mode):
    _epochs(_model(), train_each_epoch=False, mode=mode)
    err = capfd.readouterr().err
    assert err.count("is in eval mode") == 1, err
    text = " ".join(err.split())
    assert "Sequential is in eval mode at the update of step 4, so its 1 BatchNorm1d and 1 Dropout act as" in text
    assert "dropout is off; batch norm uses its running statistics and stops updating them" in text
    assert "Call model.train() before training steps" in text


def test_a_loop_that_calls_train_each_epoch_is_not_told(capfd):
    plain = _epochs(_model(), train_each_epoch=True)
    assert "eval mode" not in capfd.readouterr().err
    assert len(plain) == 12


def test_a_model_whose_mode_changes_nothing_is_not_told(capfd):
    torch.manual_seed(0)
    no_drop = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 2))  # p=0: as in eval
    _epochs(no_drop, train_each_epoch=False)
    assert "eval mode" not in capfd.readouterr().err


class FunctionalDropout(nn.Module):
    """GAT's way (pytorch/examples): no Dropout module, ``F.dropout(..., training=self.training)`` in the forward."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 2)

    def forward(self, x):
        h = F.dropout(torch.relu(self.a(x)), self.p, training=self.training)  # FOLLOWS THE MODE
        return self.b(h)


@pytest.mark.parametrize("p", [0.4, 0.0])
def test_a_functional_dropout_that_follows_the_mode_is_named_with_its_line(capfd, p):
    """No layer the mode changes, but the forward's own dropout reads ``self.training``: the evaluation saw it off,
    so a model then trained in eval mode is told, with the dropout's line (p=0 drops nothing either way: silent)."""
    torch.manual_seed(0)
    _epochs(FunctionalDropout(p), train_each_epoch=False)
    err = " ".join(capfd.readouterr().err.split())
    if not p:
        assert "eval mode" not in err
        return
    line = file_marker_line(__file__, "FOLLOWS THE MODE")
    assert err.count("is in eval mode") == 1, err
    assert (f"FunctionalDropout is in eval mode at the update of step 4, so dropout(p=0.4) at test_eval_mode.py:{line}"
            " (`h = F.dropout(torch.relu(self.a(x)), self.p, training=self.training)`), whose training flag follows "
            "the model's mode, is off while it trains") in err, err
    assert "Call model.train() before training steps" in err


def test_a_submodule_frozen_in_eval_mode_on_purpose_is_not_told(capfd):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model[1].eval()  # batch norm statistics frozen (a fine-tuned backbone): the root stays in train mode
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(3):
            loss = F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 2, (16,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert "eval mode" not in capfd.readouterr().err


def test_which_layers_change_with_the_mode():
    model = nn.ModuleDict({
        "drop": nn.Dropout(0.1), "no_drop": nn.Dropout(0.0), "bn": nn.BatchNorm2d(3),
        "bn_batch_stats": nn.BatchNorm1d(3, track_running_stats=False), "instance": nn.InstanceNorm1d(3),
        "attention": nn.MultiheadAttention(8, 2, dropout=0.1), "attention_no_drop": nn.MultiheadAttention(8, 2),
        "linear": nn.Linear(2, 2),
    }).eval()
    assert eval_mode.mode_dependent(model) == {"Dropout": 1, "BatchNorm2d": 1, "MultiheadAttention": 1}
    assert eval_mode.mode_dependent(model.train()) == {}
    many = eval_mode.line("Net", 3, eval_mode.mode_dependent(nn.Sequential(
        nn.Dropout(0.1), nn.Dropout1d(0.1), nn.Dropout2d(0.1), nn.AlphaDropout(0.1), nn.BatchNorm1d(2),
        nn.BatchNorm1d(2)).eval()))
    assert "its 2 BatchNorm1d, 1 Dropout, 1 Dropout1d, 1 Dropout2d and 1 more kind of layer act as" in many
