"""A loss a million times its first value and still finite (a float64 run diverging): said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers.diverged import diverged

pytestmark = pytest.mark.timeout(60)


def _regression(updates: int, lr: float, capfd, read_inside: bool = False) -> tuple[list[float], str]:
    """pytorch/examples' polynomial regression (features x..x^4) with MSE, in float64, under watch; the losses and
    what was said (inside the ``with`` block only, when ``read_inside``)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    target = torch.randn(4, 1, generator=gen, dtype=torch.float64) * 5
    losses, inside = [], ""
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(updates):
            x = torch.randn(32, generator=gen, dtype=torch.float64).unsqueeze(1) ** torch.arange(1, 5)
            loss = F.mse_loss(model(x), x @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if read_inside:
            inside = capfd.readouterr().err
    return losses, " ".join((inside or capfd.readouterr().err).split())


def test_a_float64_run_diverging_is_said_at_its_end(capfd):
    losses, err = _regression(30, 0.1, capfd)
    assert all(map(lambda v: v < float("inf"), losses)) and losses[-1] > 1e20  # diverged, never overflowed
    assert err.count("the training diverges") == 1, err
    from tensor_dap.format import fmt_num

    assert f"the loss grew from {fmt_num(losses[0])} at the first step to {fmt_num(losses[-1])} " in err
    assert "lower the learning rate or clip gradients" in err


def test_a_long_diverging_run_is_said_at_the_look_while_it_runs(capfd):
    losses, err = _regression(70, 0.1, capfd, read_inside=True)  # read before the watch ends: said at update 64
    assert "the training diverges" in err, err
    assert losses[-1] < float("inf")


def test_a_run_that_trains_is_not_said(capfd):
    losses, err = _regression(100, 1e-4, capfd)
    assert losses[-1] < losses[0]
    assert "diverges" not in err


@pytest.mark.parametrize("first, latest, said", [
    (0.5, 1e145, True),
    (1e-9, 0.5, False),  # a loss that starts near 0 (a warm-up's auxiliary term alone): below 1e6 itself
    (1e-9, 2e6, True),
    (-3.0, 1e9, False),  # a log-likelihood, a policy gradient: no ratio to take
    (0.5, float("inf"), False),  # the non-finite trigger's case
    (torch.tensor(2.0), torch.tensor(3e6), True),
])
def test_the_growth_rule(first, latest, said):
    assert (diverged(first, latest) is not None) is said
