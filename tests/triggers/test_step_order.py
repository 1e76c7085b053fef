"""Updates that find no gradient (``step()`` before ``backward()``, ``zero_grad()`` between them): said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import step_order

pytestmark = pytest.mark.timeout(60)

SAID = "optimizer.step() found no gradient on any of Sequential's parameters at each of its first 3 updates"


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _run(order: str, steps: int = 6) -> tuple[nn.Module, str]:
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(steps):
            x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 4, (16,), generator=gen)
            loss = F.cross_entropy(model(x), y)
            if order == "step first":
                optimizer.zero_grad()
                optimizer.step()
                loss.backward()
            elif order == "zero_grad between":
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
            elif order == "accumulation":  # two micro-batches an update
                (loss / 2).backward()
                if i % 2:
                    optimizer.step()
                    optimizer.zero_grad()
            else:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("order", ["step first", "zero_grad between"])
def test_updates_with_no_gradient_are_said_once(capfd, order):
    before = [p.detach().clone() for p in _model().parameters()]
    model, _ = _run(order)
    err = " ".join(capfd.readouterr().err.split())
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))  # what it says: nothing changed
    assert SAID in err, err
    assert "The order is optimizer.zero_grad(), loss.backward(), optimizer.step()" in err
    assert err.count("found no gradient") == 1


@pytest.mark.parametrize("order", ["usual", "accumulation"])
def test_loops_that_update_with_gradients_are_not_said(capfd, order):
    _run(order)
    assert "found no gradient" not in capfd.readouterr().err


def test_a_closure_that_makes_the_gradients_inside_step_is_not_said(capfd):
    model = _model()
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(4):
            optimizer.zero_grad()  # the gradients are None when step() starts: the closure makes them
            optimizer.step(closure)
    assert "found no gradient" not in capfd.readouterr().err


def test_an_optimizer_holding_copies_of_the_parameters_is_not_looked_at():
    said = []
    gradless = step_order.GradlessUpdates(said.append)
    model = _model()
    params = list(model.parameters())
    copies = torch.optim.SGD([p.detach().clone().requires_grad_() for p in params], lr=0.1)  # ZeRO-like flat copies
    own = torch.optim.SGD(params, lr=0.1)
    for update in range(step_order.UPDATES):
        gradless.updating(update, model, copies, params, closure=False)
    assert said == []
    for update in range(step_order.UPDATES):
        gradless.updating(update, model, own, params, closure=False)
    assert len(said) == 1 and "found no gradient" in said[0]
