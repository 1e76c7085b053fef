"""Parameters the optimizer trains but no gradient reaches (a ``.detach()`` left in the forward) are named once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers.cut_off import UPDATES

pytestmark = pytest.mark.timeout(60)


class Net(nn.Module):
    def __init__(self, cut: str) -> None:
        super().__init__()
        self.cut = cut
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 2)
        self.frozen = nn.Linear(2, 2).requires_grad_(False)  # frozen on purpose: never said

    def forward(self, x):
        h = self.encoder(x)
        if self.cut == "detach":
            h = h.detach()  # left from a feature-extraction experiment
        elif self.cut == "data":
            h = h.data
        return self.head(h)


def _train(model: nn.Module, updates: int) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(updates):
            x = torch.randn(32, 8)
            loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize("cut", ["detach", "data"])
def test_layers_before_a_cut_are_named_once(capfd, cut):
    torch.manual_seed(0)
    _train(Net(cut), UPDATES + 10)
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("got no gradient") == 1, err
    assert (f"2 of Net's 4 parameters that require grad got no gradient at any of its first {UPDATES} updates, so "
            "they never learn: encoder.0.weight, encoder.0.bias. Something cuts them off from the loss") in err


def test_a_model_whose_every_parameter_learns_or_a_short_run_is_not_said(capfd):
    torch.manual_seed(0)
    _train(Net("none"), UPDATES + 5)
    _train(Net("detach"), UPDATES - 1)  # not looked at long enough to say
    assert "got no gradient" not in capfd.readouterr().err


def test_a_layer_frozen_after_the_watch_began_is_not_said(capfd):
    """A fine-tuning schedule that freezes the encoder at its first step: no gradient reaches it, as meant."""
    torch.manual_seed(0)
    model = Net("none")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tensor_dap.watch(model, optimizer, on="raise"):
        model.encoder.requires_grad_(False)
        for _ in range(UPDATES + 2):
            x = torch.randn(32, 8)
            loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert "got no gradient" not in capfd.readouterr().err


def test_a_part_used_now_and_then_is_not_said(capfd):
    """A branch taken at some of the first updates only (an expert routed to rarely) did get gradients."""
    class Sometimes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 2), nn.Linear(8, 2)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.a(x) + (self.b(x) if self.calls % 7 == 0 else 0)

    torch.manual_seed(0)
    _train(Sometimes(), UPDATES + 5)
    assert "got no gradient" not in capfd.readouterr().err
