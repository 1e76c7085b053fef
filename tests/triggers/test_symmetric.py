"""Units a constant initialization keeps identical (zero weights and biases everywhere): said once, after two
updates; a single zero-initialized layer (a classifier: a deliberate trick) breaks its symmetry and is not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import symmetric

pytestmark = pytest.mark.timeout(60)


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(model: nn.Module, x_shape=(32, 8), steps: int = 6) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(steps):
            out = model(torch.randn(*x_shape, generator=gen))
            optimizer.zero_grad()
            F.cross_entropy(out, torch.randint(0, 4, (x_shape[0],), generator=gen)).backward()
            optimizer.step()



def _err(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


def _constant(model: nn.Module, value: float) -> nn.Module:
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.constant_(m.weight, value)
            nn.init.zeros_(m.bias)
    return model


@pytest.mark.parametrize("value", [0.0, 0.05])
def test_a_constant_initialization_everywhere_is_said_once(capfd, value):
    _train(_constant(_mlp(), value))
    err = _err(capfd)
    assert "tensor_dap: after 2 updates the output units of 0.weight (16 units), 2.weight (16 units)" in err, err
    assert "a constant or zero initialization (nn.init.zeros_, constant_) never breaks that symmetry" in err
    assert err.count("still have identical weights") == 1


def test_convolutions_are_compared_by_output_channel(capfd):
    torch.manual_seed(0)
    net = _constant(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(),
                                  nn.Linear(8 * 4 * 4, 4)), 0.0)
    _train(net, x_shape=(16, 3, 8, 8))
    assert "0.weight (8 units), 2.weight (8 units)" in _err(capfd)


@pytest.mark.parametrize("init", ["default", "zero classifier", "constant weights, random biases"])
def test_initializations_that_break_the_symmetry_are_not_said(capfd, init):
    model = _mlp()
    if init == "zero classifier":
        nn.init.zeros_(model[4].weight)
    elif init.startswith("constant"):
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, 0.1)  # the biases keep torch's random default: the units differ
    _train(model)
    assert "identical weights" not in _err(capfd)


def test_what_is_compared_is_bounded_and_frozen_weights_are_left_out():
    model = nn.Sequential(nn.Linear(4, 1000), nn.Linear(1000, 3))
    nn.init.zeros_(model[0].weight)
    assert symmetric.identical_units(model) == [("0.weight", 1000)]  # the first ROWS rows decide
    model[0].weight.requires_grad_(False)
    assert symmetric.identical_units(model) == []
    table = nn.Embedding(100, 8)
    nn.init.zeros_(table.weight)  # rows are tokens: those not seen yet are all alike
    assert symmetric.identical_units(table) == []
