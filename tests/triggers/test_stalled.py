"""Gradients exactly zero at two looks in a row (a saturated softmax, ReLUs that all died): said once."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers.stalled import zero_grads

pytestmark = pytest.mark.timeout(60)


def _run(model: nn.Module, loss_of: Callable[[int, torch.Tensor], torch.Tensor], updates: int = 130,
         lr: float = 0.1) -> list[torch.Tensor]:
    """``updates`` Adam steps of ``model`` under watch on 16 random 4-feature rows each; its weights after."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(updates):
            loss = loss_of(i, model(torch.randn(16, 4, generator=gen)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _saturated_policy() -> nn.Module:
    """A policy whose softmax gives exactly 1 and 0: the log-probability of its greedy action is exactly 0."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 2), nn.Softmax(dim=1))
    with torch.no_grad():
        policy[0].weight.zero_()
        policy[0].bias.copy_(torch.tensor([200.0, -200.0]))
    return policy


def _greedy(i: int, probs: torch.Tensor) -> torch.Tensor:
    return -probs.max(dim=1).values.log().sum()


def test_a_saturated_softmax_is_said_once_with_the_learning_rate(capfd):
    _run(_saturated_policy(), _greedy, updates=200, lr=3.0)
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("exactly zero at the updates") == 1, err  # said once, at the second look (update 128)
    assert ("every gradient the optimizer holds (2 tensors) is exactly zero at the updates of steps 64 and 128, "
            "so the weights no longer learn while the run goes on (the loss: 0, the learning rate: 3)") in err
    assert "saturated outputs (a softmax or sigmoid at exactly 0 and 1" in err


def test_relus_that_all_died_name_the_one_tensor_still_learning(capfd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    with torch.no_grad():
        model[0].bias.fill_(-1e3)  # no input reaches above zero: every ReLU is dead
    before = [p.detach().clone() for p in model.parameters()]
    after = _run(model, lambda i, out: F.cross_entropy(out, torch.arange(16) % 3))
    err = " ".join(capfd.readouterr().err.split())
    assert ("the gradients of 3 of the 4 tensors the optimizer holds are (only 2.bias still gets one) exactly zero "
            "at the updates of steps 64 and 128") in err, err
    assert all(torch.equal(a, b) for a, b in zip(before[:3], after[:3]))  # (what the line says is true)


def test_a_single_flat_look_and_a_learning_model_are_not_said(capfd):
    def flat_once(i: int, out: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(out, torch.arange(16) % 2)
        return loss * 0 if i == 64 else loss  # zero gradients at one look only

    torch.manual_seed(0)
    _run(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), flat_once, updates=200)
    assert "exactly zero at the updates" not in capfd.readouterr().err


def test_idle_experts_are_not_said_while_one_learns(capfd):
    class Experts(nn.Module):
        """Four experts, only the first ever used: three of the four weight matrices get exactly zero gradients."""

        def __init__(self) -> None:
            super().__init__()
            self.experts = nn.ModuleList(nn.Linear(4, 2) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.experts[0](x) + sum(e(x) * 0 for e in self.experts[1:])

    torch.manual_seed(0)
    _run(Experts(), lambda i, out: F.cross_entropy(out, torch.arange(16) % 2), updates=200)
    assert "exactly zero at the updates" not in capfd.readouterr().err


def test_zero_grads_reads_each_tensor_a_nan_is_not_zero_and_a_sparse_one_by_its_values():
    dense = [torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)]
    dense[0].grad = torch.zeros(3)
    dense[1].grad = torch.tensor([0.0, float("nan")])
    dense[2].grad = torch.tensor([1e-30])
    assert zero_grads(dense) == [True, False, False]
    table = nn.Embedding(5, 2, sparse=True)
    table(torch.tensor([1, 3])).sum().backward()
    assert zero_grads([table.weight]) == [False]
    table.weight.grad = table.weight.grad * 0
    assert zero_grads([table.weight]) == [True]


def test_a_large_gradient_is_read_whole_when_the_values_read_first_are_all_zero():
    """The look reads 16 runs of 64 values spread over a large gradient first: a gradient non-zero only elsewhere
    (one live unit's row among dead ones, a NaN) must still count as learning, and an all-zero one must not."""
    from tensor_dap.triggers.stalled import _learning

    w = torch.zeros(512, 784, requires_grad=True)
    w.grad = torch.zeros_like(w)
    assert not _learning(w)
    w.grad[511, 783] = 0.5  # outside every run read first
    assert _learning(w)
    w.grad.zero_()[300, 500] = float("nan")
    assert _learning(w)
    w.grad.zero_()[0, 3] = -2.0  # inside the first run
    assert _learning(w)
    w.grad = torch.zeros(784, 512).t()  # not contiguous: read whole
    assert not _learning(w)
